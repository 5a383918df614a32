"""The commands: tabletalk serve|migrate|backup|restore|move-to|model."""
