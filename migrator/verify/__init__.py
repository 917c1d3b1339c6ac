"""ddp-migrate verify: run a migrated script briefly under torchrun and check how it trains."""
