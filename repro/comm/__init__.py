"""Process groups, launching, and the single module that talks to torch.distributed."""
