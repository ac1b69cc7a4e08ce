"""The Slack edge: the bot (`bot`), its Web API client and file download (`webapi`), and the
Block Kit message of an analysis (`blocks`). slack_bolt and slack_sdk are imported only when
the bot is configured; this package's top level imports nothing heavy."""

import re

# a channel (C), private channel (G) or DM (D) ID: what `notify=` takes
CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{8,20}$")
