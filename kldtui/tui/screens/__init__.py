"""The app's screens: the dashboard (drives a pipeline), the viewer (saved reports), one result,
and the small dialogs. Each main screen carries its own keys and help."""
