"""A recognition session: intake, engine links, response log, lifecycle."""
