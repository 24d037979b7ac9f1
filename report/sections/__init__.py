"""The sections of a run's page, each from the stored records."""
