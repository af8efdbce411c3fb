"""Glue to training frameworks (TRL first); each module imports its framework lazily."""
