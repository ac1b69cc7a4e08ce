"""The Slack edge (issue 11): Block Kit rendering so far; the bot and hook notifications build on it."""
