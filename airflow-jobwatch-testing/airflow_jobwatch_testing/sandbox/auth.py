"""Bearer-token authentication: the static admin token and signed tokens that expire.

A real API server accepts several kinds of bearer token: static tokens, service-account tokens (JWTs
signed by the server, with an ``exp`` claim when projected), and tokens a cloud's exec plugin hands
out (EKS, GKE: valid about 15 minutes to an hour). What a client must survive is the same for all of
them: the token stops working at some point and the server answers **401 Unauthorized** until the
client presents a new one. The sandbox models that with:

* the **admin token** (``Sandbox.token``), static, never expires, user ``sandbox-admin`` in group
  ``system:masters`` (RBAC never refuses it, like a cluster-admin kubeconfig);
* **signed tokens**: JWT-shaped (``header.claims.signature``, HMAC-SHA256 with the sandbox's key),
  with ``sub`` (the user), ``groups`` and ``exp``. Anyone holding the key can mint one
  (:func:`mint_token`), which is how the exec-plugin command (:mod:`.credential`) works without
  talking to the server, like a cloud provider's token service.

A token is refused (401) when its signature is wrong, it expired, or it was expired on purpose
(:meth:`Authenticator.expire`). The 401 body is the real server's (recorded in
``tests/fixtures/real-apiserver/status-401-unauthorized.json``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections import defaultdict
from dataclasses import dataclass, field

ADMIN_USER = "sandbox-admin"
# Every authenticated request is in system:authenticated; system:masters bypasses RBAC (as on a
# real server, where that group is bound to cluster-admin and short-circuits the authorizer).
AUTHENTICATED = "system:authenticated"
MASTERS = "system:masters"
SA_PREFIX = "system:serviceaccount:"
ISSUER = "k8s-sandbox"
_HEADER = {"alg": "HS256", "typ": "JWT"}


@dataclass(frozen=True)
class Identity:
    """Who a request is from (what RBAC decides on)."""

    user: str
    groups: tuple[str, ...] = field(default=(AUTHENTICATED,))
    token_id: str = ""

    @property
    def is_admin(self) -> bool:
        return MASTERS in self.groups


def service_account_user(namespace: str, name: str) -> str:
    """``system:serviceaccount:<namespace>:<name>``: the user name of a service account's token."""
    return f"{SA_PREFIX}{namespace}:{name}"


def default_groups(user: str) -> tuple[str, ...]:
    """The groups a real server puts a user in: service accounts get ``system:serviceaccounts`` and
    ``system:serviceaccounts:<namespace>``; everyone gets ``system:authenticated``."""
    if user.startswith(SA_PREFIX):
        ns = user[len(SA_PREFIX) :].split(":", 1)[0]
        return ("system:serviceaccounts", f"system:serviceaccounts:{ns}", AUTHENTICATED)
    return (AUTHENTICATED,)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def mint_token(
    key: bytes,
    user: str,
    *,
    groups: tuple[str, ...] | list[str] | None = None,
    ttl: float | None = None,
    now: float | None = None,
) -> tuple[str, float | None]:
    """A signed token for ``user`` valid for ``ttl`` seconds (None: no expiry), and its expiry time."""
    if not user:
        raise ValueError("a token needs a user name, got an empty one")
    if ttl is not None and ttl <= 0:
        raise ValueError(f"ttl must be > 0 seconds or None, got {ttl}")
    issued = time.time() if now is None else now
    claims: dict[str, object] = {
        "iss": ISSUER,
        "sub": user,
        "groups": list(groups) if groups is not None else list(default_groups(user)),
        "iat": int(issued),
        "jti": secrets.token_hex(8),
    }
    expires = issued + ttl if ttl is not None else None
    if expires is not None:
        claims["exp"] = expires
    signing_input = _b64(json.dumps(_HEADER).encode()) + "." + _b64(json.dumps(claims).encode())
    signature = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(signature)}", expires


class Authenticator:
    """Checks ``Authorization: Bearer ...`` headers. Lives in the sandbox's event loop (no locking).

    :param admin_token: the static admin token.
    :param key: HMAC key of signed tokens (random when None).
    """

    def __init__(self, admin_token: str, key: bytes | None = None) -> None:
        self.key = key if key is not None else secrets.token_bytes(32)
        self._static: dict[str, Identity] = {
            admin_token: Identity(ADMIN_USER, (MASTERS, AUTHENTICATED), token_id="admin")
        }
        self._expired_ids: set[str] = set()
        # user -> ids of the tokens the server accepted for it (a refreshed credential shows up here).
        self._seen: defaultdict[str, set[str]] = defaultdict(set)
        self.refused = 0

    def issue(self, user: str, *, groups: tuple[str, ...] | None = None, ttl: float | None = None) -> str:
        """A new signed token for ``user`` that expires after ``ttl`` seconds (None: never)."""
        token, _expires = mint_token(self.key, user, groups=groups, ttl=ttl)
        return token

    def add_static(self, token: str, user: str, groups: tuple[str, ...] | None = None) -> None:
        """Accept ``token`` for ``user`` until :meth:`expire` (like ``--token-auth-file``)."""
        self._static[token] = Identity(user, groups or default_groups(user), token_id=f"static:{user}")

    def expire(self, token: str) -> None:
        """Refuse ``token`` from now on (401), whatever its ``exp`` says. The admin token cannot be
        expired (the admin API and the sandbox's own kubeconfig depend on it)."""
        identity = self._static.get(token)
        if identity is not None:
            if identity.is_admin:
                raise ValueError("the admin token cannot be expired: issue_token() a user token to expire")
            del self._static[token]
            return
        claims = self._verify(token)
        if claims is not None:
            self._expired_ids.add(str(claims.get("jti")))

    def tokens_seen(self, user: str) -> int:
        """How many distinct tokens were accepted for ``user``."""
        return len(self._seen.get(user, ()))

    def authenticate(self, header: str, *, now: float | None = None) -> Identity | None:
        """The identity of a request's ``Authorization`` header, or None (-> 401)."""
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            self.refused += 1
            return None
        token = token.strip()
        for static, identity in self._static.items():
            if secrets.compare_digest(token.encode(), static.encode()):
                self._seen[identity.user].add(identity.token_id)
                return identity
        claims = self._verify(token)
        if claims is None:
            self.refused += 1
            return None
        exp = claims.get("exp")
        current = time.time() if now is None else now
        jti = str(claims.get("jti"))
        if (isinstance(exp, int | float) and current >= exp) or jti in self._expired_ids:
            self.refused += 1
            return None
        user = str(claims["sub"])
        raw_groups = claims.get("groups")
        groups = tuple(str(g) for g in raw_groups) if isinstance(raw_groups, list) else default_groups(user)
        if AUTHENTICATED not in groups:
            groups += (AUTHENTICATED,)
        self._seen[user].add(jti)
        return Identity(user, groups, token_id=jti)

    def _verify(self, token: str) -> dict[str, object] | None:
        parts = token.split(".")
        if len(parts) != 3:
            return None
        expected = hmac.new(self.key, f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest()
        try:
            if not hmac.compare_digest(expected, _unb64(parts[2])):
                return None
            claims = json.loads(_unb64(parts[1]))
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(claims, dict) or not isinstance(claims.get("sub"), str):
            return None
        return claims


__all__ = [
    "ADMIN_USER",
    "Authenticator",
    "Identity",
    "default_groups",
    "mint_token",
    "service_account_user",
]
