"""What the app builds once in its lifespan and every request uses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import jinja2

from app.api.authcache import AuthCache
from app.service.context import ServiceContext
from app.web.session import SessionCodec

if TYPE_CHECKING:
    from app.slack.bot import SlackBot


@dataclass
class AppContext(ServiceContext):
    """The service's context plus what only the HTTP edges need."""

    templates: jinja2.Environment
    auth: AuthCache
    sessions: SessionCodec
    slack: SlackBot | None = None  # built when LOGTRIAGE_SLACK_BOT_TOKEN is set
