"""What the app builds once in its lifespan and every request uses."""

from __future__ import annotations

from dataclasses import dataclass

from app.http.authcache import AuthCache
from app.http.session import SessionCodec
from app.service.context import ServiceContext


@dataclass(kw_only=True)
class AppContext(ServiceContext):
    """The service's context plus what every HTTP edge needs: who is signed in, cached tokens."""

    auth: AuthCache
    sessions: SessionCodec
