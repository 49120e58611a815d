"""The modeled network: alpha-beta collective costs, compute times, the modeled clock."""
