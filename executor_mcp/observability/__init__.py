"""Health, metrics and logs: what a deployed server says about itself."""
