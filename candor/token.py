"""The pass token: the gate's Ed25519-signed permission to generate for one query + evidence.

A JWT (RFC 7519) with the algorithm pinned to EdDSA; keys are chosen by ``kid`` so they rotate.
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import threading
import time
import unicodedata
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from candor.files import write_atomically

log = logging.getLogger("candor.token")

ALGORITHM = "EdDSA"


class TokenError(Exception):
    """A pass token was refused; ``reason`` is a stable machine-readable code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def normalise_query(query: str) -> str:
    """The form of a query that is hashed: NFKC, case-folded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", query).casefold().split())


def query_sha256(query: str) -> str:
    return hashlib.sha256(normalise_query(query).encode()).hexdigest()


def text_sha256(text: str) -> str:
    """Evidence is hashed exactly as sent: any change to the text breaks the token."""
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class EvidenceClaim:
    chunk_id: str
    sha256: str


@dataclass(frozen=True)
class PassClaims:
    """What a verified token says."""

    token_id: str
    tenant: str
    query_sha256: str
    evidence: tuple[EvidenceClaim, ...]
    policy_version: str
    tier: str
    confidence: float
    expires_at: int
    clarify_only: bool = False


class TokenSigner:
    """Mints pass tokens (gate side; holds the private key)."""

    def __init__(
        self, key: Ed25519PrivateKey, kid: str, issuer: str, audience: str, ttl_seconds: int
    ) -> None:
        self._key, self._kid = key, kid
        self._issuer, self._audience, self._ttl = issuer, audience, ttl_seconds

    def mint(
        self,
        *,
        tenant: str,
        query: str,
        evidence: Iterable[tuple[str, str]],
        policy_version: str,
        tier: str,
        confidence: float,
        clarify_only: bool = False,
        now: float | None = None,
        titles: Sequence[str] | None = None,
    ) -> tuple[str, int]:
        """Sign a token for ``evidence`` given as (chunk_id, text), with each item's title when
        ``titles`` is given (the generator puts titles into its prompt, so they are signed as
        well); returns (token, expires_at)."""
        issued = int(now if now is not None else time.time())
        expires = issued + self._ttl
        claims: dict[str, Any] = {
            "iss": self._issuer,
            "aud": self._audience,
            "iat": issued,
            "exp": expires,
            "jti": uuid.uuid4().hex,
            "tenant": tenant,
            "qh": query_sha256(query),
            "ev": _evidence_claims(list(evidence), titles),
            "pv": policy_version,
            "tier": tier,
            "conf": round(confidence, 4),
            "clarify": clarify_only,
        }
        token = jwt.encode(claims, self._key, algorithm=ALGORITHM, headers={"kid": self._kid})
        return token, expires


def _evidence_claims(
    evidence: Sequence[tuple[str, str]], titles: Sequence[str] | None
) -> list[dict[str, str]]:
    if titles is not None and len(titles) != len(evidence):
        raise ValueError(f"{len(titles)} titles for {len(evidence)} evidence items")
    items = [{"id": cid, "h": text_sha256(text)} for cid, text in evidence]
    for item, title in zip(items, titles or (), strict=False):
        item["th"] = text_sha256(title)
    return items


class ReplayStore(Protocol):
    """Remembers used token ids until they expire."""

    def claim(self, token_id: str, expires_at: int) -> bool:
        """Record the id; False if it was already used."""
        ...


class InMemoryReplayStore:
    """Per-process replay store; replicas of the generator each keep their own.

    Ids leave in expiry order from a heap, a few per claim: rebuilding the whole map once it
    held 10,000 live ids cost every claim 0.5 ms at 10k and 3 ms at 40k (about 150 Generate
    calls a second keep 10k live), under a lock on the event loop.
    """

    def __init__(self) -> None:
        self._used: dict[str, int] = {}
        self._expiry: list[tuple[int, str]] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._used)

    def claim(self, token_id: str, expires_at: int) -> bool:
        now = int(time.time())
        with self._lock:
            while self._expiry and self._expiry[0][0] < now:
                _, gone = heapq.heappop(self._expiry)
                self._used.pop(gone, None)
            if token_id in self._used:
                return False
            self._used[token_id] = expires_at
            heapq.heappush(self._expiry, (expires_at, token_id))
            return True


class KeyRing:
    """Public keys by ``kid`` from a mounted directory, re-read so keys rotate without restarts.

    An unknown ``kid`` triggers a re-read (at most once a second); the set is also refreshed
    every ``refresh_seconds`` so a removed key stops verifying.
    """

    def __init__(self, directory: Path, refresh_seconds: float = 30.0) -> None:
        self._dir, self._refresh = directory, refresh_seconds
        self._keys = load_public_keys(directory)  # a bad file stops start-up, named
        self._bad: list[str] = []
        self._loaded = self._last_miss = time.monotonic()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._keys)

    def _reload(self) -> None:
        # A file half-copied in a rotation must not take every key down with it: it is
        # skipped (and named in the log) and the good keys keep verifying.
        bad: list[str] = []
        self._keys = load_public_keys(self._dir, bad)
        if bad != self._bad:
            if bad:
                log.warning("unusable public key files skipped", extra={"files": bad})
            self._bad = bad
        self._loaded = time.monotonic()

    def get(self, kid: str) -> Ed25519PublicKey | None:
        now = time.monotonic()
        with self._lock:
            if now - self._loaded > self._refresh:
                self._reload()
            key = self._keys.get(kid)
            if key is None and now - self._last_miss > 1.0:
                self._last_miss = now
                self._reload()
                key = self._keys.get(kid)
        return key


class TokenVerifier:
    """Checks pass tokens (generator side; holds only public keys)."""

    def __init__(
        self,
        public_keys: Mapping[str, Ed25519PublicKey] | KeyRing,
        issuer: str,
        audience: str,
        replay_store: ReplayStore,
        clock_skew_seconds: int = 5,
    ) -> None:
        self._keys = public_keys if isinstance(public_keys, KeyRing) else dict(public_keys)
        self._issuer, self._audience = issuer, audience
        self._replays = replay_store
        self._skew = clock_skew_seconds

    def verify(
        self,
        token: str,
        query: str,
        evidence: Sequence[tuple[str, str]],
        titles: Sequence[str] | None = None,
    ) -> PassClaims:
        """Verify every claim against this request and spend the token; raises TokenError with
        a reason code."""
        claims = self.check(token, query, evidence, titles)
        self.spend(claims)
        return claims

    def spend(self, claims: PassClaims) -> None:
        """Mark a checked token used; TOKEN_REPLAYED if it already was. Spend only once the
        caller is authorised, so a refused call leaves the token usable."""
        # Remembered for as long as the token verifies, its skew included: forgotten any
        # earlier, a pruned token could be spent again.
        if not self._replays.claim(claims.token_id, claims.expires_at + self._skew):
            raise TokenError("TOKEN_REPLAYED", "pass token was already used")

    def check(
        self,
        token: str,
        query: str,
        evidence: Sequence[tuple[str, str]],
        titles: Sequence[str] | None = None,
    ) -> PassClaims:
        """Every claim against this request except replay (see :meth:`spend`). A title the
        token signed must be sent unchanged (``titles``, one per item; none sent counts as
        empty); a token minted without titles, by a gate older than title signing, leaves
        them unchecked."""
        if not token:
            raise TokenError("TOKEN_MISSING", "a pass token is required")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise TokenError("TOKEN_MALFORMED", f"pass token is malformed: {exc}") from exc
        if header.get("alg") != ALGORITHM:
            raise TokenError("TOKEN_MALFORMED", "pass token algorithm is not EdDSA")
        key = self._keys.get(str(header.get("kid", "")))
        if key is None:
            raise TokenError("TOKEN_UNKNOWN_KEY", "pass token is signed by an unknown key")
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[ALGORITHM],
                audience=self._audience,
                issuer=self._issuer,
                leeway=self._skew,
                options={"require": ["exp", "iat", "jti", "aud", "iss"]},
            )
        except jwt.ExpiredSignatureError as exc:
            raise TokenError("TOKEN_EXPIRED", "pass token has expired") from exc
        except jwt.ImmatureSignatureError as exc:
            raise TokenError(
                "TOKEN_NOT_YET_VALID",
                f"pass token is issued in the future beyond the allowed {self._skew}s clock skew: "
                "the gate's clock is ahead of the generator's (check NTP)",
            ) from exc
        except jwt.InvalidAudienceError as exc:
            raise TokenError("TOKEN_AUDIENCE", "pass token is for another audience") from exc
        except jwt.InvalidIssuerError as exc:
            raise TokenError("TOKEN_ISSUER", "pass token has an unexpected issuer") from exc
        except jwt.InvalidSignatureError as exc:
            raise TokenError("TOKEN_SIGNATURE", "pass token signature is invalid") from exc
        except jwt.PyJWTError as exc:
            raise TokenError("TOKEN_MALFORMED", f"pass token is invalid: {exc}") from exc
        try:
            return _matched(claims, query, evidence, titles)
        except TokenError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, ArithmeticError) as exc:
            # Signed, so only a gate (or its key) wrote it: still a refusal, not a crash.
            raise TokenError(
                "TOKEN_MALFORMED", f"pass token claims are malformed: {exc!r}"
            ) from exc


def _matched(
    claims: dict[str, Any],
    query: str,
    evidence: Sequence[tuple[str, str]],
    titles: Sequence[str] | None,
) -> PassClaims:
    """The verified claims, checked against this request."""
    if claims.get("qh") != query_sha256(query):
        raise TokenError("QUERY_MISMATCH", "the query is not the one the gate passed")
    signed = [(e["id"], e["h"]) for e in claims.get("ev", [])]
    sent = [(cid, text_sha256(text)) for cid, text in evidence]
    if signed != sent:
        raise TokenError("EVIDENCE_MISMATCH", "the evidence is not what the gate admitted")
    sent_titles = list(titles) if titles is not None else [""] * len(sent)
    for item, title in zip(claims.get("ev", []), sent_titles, strict=False):
        if "th" in item and item["th"] != text_sha256(title):
            raise TokenError(
                "EVIDENCE_MISMATCH", f"evidence {item['id']}'s title is not what the gate sent"
            )
    return PassClaims(
        token_id=str(claims["jti"]),
        tenant=str(claims.get("tenant", "")),
        query_sha256=str(claims["qh"]),
        evidence=tuple(EvidenceClaim(cid, h) for cid, h in signed),
        policy_version=str(claims.get("pv", "")),
        tier=str(claims.get("tier", "")),
        confidence=float(claims.get("conf", 0.0)),
        expires_at=int(claims["exp"]),
        clarify_only=bool(claims.get("clarify", False)),
    )


class SigningKeyError(ValueError):
    """A key file (the gate's signing key, a generator's public key) cannot be used; start-up
    stops with this message."""


def load_or_create_signing_key(path: Path) -> Ed25519PrivateKey:
    """Load a PEM private key, creating it (mode 0600) if absent; see write_public_key.

    An existing file is never replaced, even an empty or corrupt one: tokens signed with the
    key it held would stop verifying, so that takes an operator's decision.
    """
    if not path.exists():
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        try:
            write_atomically(path, pem, 0o600, replace=False)
            return key
        except FileExistsError:
            pass  # another process created it first: use theirs
        except OSError as exc:
            raise SigningKeyError(
                f"cannot create the signing key {path}: {exc}; free space on that filesystem "
                "(or set gate.signing_key_path elsewhere) and start again"
            ) from exc
    try:
        loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise SigningKeyError(
            f"cannot load the signing key {path}: {exc}. Restore it from a backup; or, accepting "
            "that tokens it signed stop verifying, move it away so a new key is created (or set "
            "gate.signing_key_path to another key) and give the generators its public key"
        ) from exc
    if not isinstance(loaded, Ed25519PrivateKey):
        raise SigningKeyError(f"{path} is not an Ed25519 private key")
    return loaded


def write_public_key(key: Ed25519PrivateKey, directory: Path, kid: str) -> Path:
    out = directory / f"{kid}.pub.pem"
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    write_atomically(out, pem)
    return out


def load_public_keys(directory: Path, bad: list[str] | None = None) -> dict[str, Ed25519PublicKey]:
    """Every ``<kid>.pub.pem`` in a directory (a mounted Secret in Kubernetes).

    A file that is no Ed25519 public key raises SigningKeyError naming it; with ``bad`` given
    it is skipped and its path appended there instead.
    """
    keys: dict[str, Ed25519PublicKey] = {}
    for pem in sorted(directory.glob("*.pub.pem")):
        try:
            key = serialization.load_pem_public_key(pem.read_bytes())
            if not isinstance(key, Ed25519PublicKey):
                raise ValueError(f"a {type(key).__name__}, not an Ed25519 public key")
        except (OSError, ValueError, TypeError) as exc:
            if bad is None:
                raise SigningKeyError(f"cannot load the public key {pem}: {exc}") from exc
            bad.append(str(pem))
            continue
        keys[pem.name.removesuffix(".pub.pem")] = key
    return keys
