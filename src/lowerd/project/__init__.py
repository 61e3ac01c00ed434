"""lowerd.project: the project model — config, errors, results, build state. Never imports torch."""
