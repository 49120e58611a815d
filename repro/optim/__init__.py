"""Optimizers that step stacked worker parameters, their config and the learning-rate
schedule: below the strategies and the trainer, so a method may name the optimizer it is
handed without depending on the training loop."""
