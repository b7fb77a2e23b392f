"""Profiles, the work-folder layout, the pipeline scheduler, demo and host checks."""
