"""Credentials and visibility for the twin's Kubernetes API.

kubectl only sends bearer tokens over TLS, so the twin serves HTTPS with a self-signed CA kept in the
cache folder (``tls_material``; EC P-256 keys are cheap). Two fixed tokens exist: the admin's (the
harness and fault injection; a member of ``system:masters``, so RBAC always allows it and it sees
everything) and the agent's, which authenticates as the ServiceAccount ITBench creates for its agent
(``agent-rbac.yaml``). Service-account tokens (``TokenRequest``, a pod's projected token) are JWTs
signed with a key kept beside the CA (``issue_token``). What the agent may do is decided by RBAC over the store's RBAC objects
(``rbac.py``); ``Visibility`` hides what RBAC cannot express: an API group's presence in
discovery and OpenAPI, and objects (Events about hidden things, hidden namespaces' contents) that
a broad grant would otherwise list. Every identity but the admin — the agent and anyone reached by
impersonation — gets the restricted visibility.
"""

from __future__ import annotations

import base64
import datetime
import functools
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import secrets
import ssl
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from filelock import FileLock

from itbench_gym.backends.rbac import agent_service_account
from itbench_gym.clock import SIM_EPOCH
from itbench_gym.paths import cache_dir

from . import errors
from .rbac import PRIVILEGED_GROUP

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Visibility:
    """What an identity may see: hidden namespaces and API groups answer 404 and vanish from lists."""

    hidden_namespaces: frozenset[str] = frozenset()
    hidden_groups: frozenset[str] = frozenset()

    def namespace_visible(self, namespace: str | None) -> bool:
        return not namespace or namespace not in self.hidden_namespaces

    def group_visible(self, group: str) -> bool:
        return group not in self.hidden_groups

    def api_version_visible(self, api_version: str | None) -> bool:
        return self.group_visible((api_version or "").rpartition("/")[0])

    @property
    def everything(self) -> bool:
        return not self.hidden_namespaces and not self.hidden_groups


EVERYTHING = Visibility()


@dataclass(frozen=True)
class BoundAccount:
    """The ServiceAccount a TokenRequest's token authenticates as (invalid once the account is gone)."""

    namespace: str
    name: str
    uid: str

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}"


@dataclass(frozen=True)
class BoundObject:
    """An object a token is bound to (``boundObjectRef``: a Pod, Secret or Node; the pod's node for a
    pod-bound token): the token is invalid once the object is gone."""

    kind: str
    name: str
    uid: str


@dataclass(frozen=True)
class Identity:
    username: str
    groups: tuple[str, ...]
    visibility: Visibility = field(default=EVERYTHING)
    uid: str = ""

    @property
    def admin(self) -> bool:
        """Sees everything (the harness); RBAC still decides what it may do."""
        return self.visibility.everything

    @property
    def privileged(self) -> bool:
        return PRIVILEGED_GROUP in self.groups


ADMIN_USER = "kubernetes-admin"


#: The service-account token issuer and API audience of the cluster ITBench runs (kind's kubeadm:
#: ``--service-account-issuer``; ``--api-audiences`` defaults to it).
TOKEN_ISSUER = "https://kubernetes.default.svc.cluster.local"
#: A pod-bound token asked for with this lifetime (the kubelet's projected token) lives a year, warned
#: about after the asked lifetime (``--service-account-extend-token-expiration``, on by default).
WARN_ONLY_EXPIRATION_SECONDS = 3607
EXTENDED_EXPIRATION_SECONDS = 365 * 24 * 3600

#: Looks up a stored object's uid by (kind, namespace, name); None when there is none.
ObjectUid = Callable[[str, str, str], "str | None"]


class Auth:
    """Bearer-token authentication: the admin's and the agent's fixed tokens, and the service-account
    tokens ``issue_token`` signs."""

    def __init__(self, agent_visibility: Visibility = EVERYTHING, *, admin_token: str | None = None,
                 agent_token: str | None = None) -> None:
        self.admin_token = admin_token or secrets.token_urlsafe(32)
        self.agent_token = agent_token or secrets.token_urlsafe(32)
        #: What every identity but the admin sees (the agent, impersonated users).
        self.restricted = agent_visibility
        self.admin = Identity(ADMIN_USER, (PRIVILEGED_GROUP, "system:authenticated"))
        sa = agent_service_account()
        self.agent = Identity(sa.username, sa.groups, agent_visibility)

    def authenticate(self, authorization: str | None, now: float | None = None, object_uid: ObjectUid | None = None) -> Identity:
        """The identity behind an ``Authorization`` header; 401 Unauthorized otherwise.

        A service-account token is valid from its ``nbf`` until its ``exp`` (at ``now``), and while the
        ServiceAccount and the objects it is bound to still exist with the same uids (``object_uid``
        looks them up), as bound tokens are.
        """
        if authorization:
            scheme, _, token = authorization.partition(" ")
            token = token.strip()
            if scheme.lower() == "bearer" and token:
                if hmac.compare_digest(token, self.admin_token):
                    return self.admin
                if hmac.compare_digest(token, self.agent_token):
                    return self.agent
                identity = self._service_account(token, now, object_uid)
                if identity is not None:
                    return identity
        raise errors.unauthorized()

    def _service_account(self, token: str, now: float | None, object_uid: ObjectUid | None) -> Identity | None:
        """The account of a valid service-account token (signature, issuer, an audience of this API
        server, its time window, the objects it names); None for anything else."""
        try:
            claims = jwt.decode(token, service_account_key().public_key(), algorithms=["RS256"], audience=TOKEN_ISSUER,
                                issuer=TOKEN_ISSUER, options={"verify_exp": False, "verify_nbf": False, "verify_iat": False})
            private = claims["kubernetes.io"]
            namespace, account = str(private["namespace"]), private["serviceaccount"]
            refs = [("ServiceAccount", namespace, account)] + [(kind, "" if kind == "Node" else namespace, private[kind.lower()])
                                                               for kind in ("Pod", "Secret", "Node") if kind.lower() in private]
            if now is not None and not float(claims["nbf"]) <= now < float(claims["exp"]):
                return None
            if object_uid is not None and any(object_uid(kind, ns, str(ref["name"])) != ref["uid"] for kind, ns, ref in refs):
                return None
            return self.impersonated(str(claims["sub"]), ())
        except (jwt.PyJWTError, KeyError, TypeError, ValueError):
            return None

    def impersonated(self, username: str, groups: tuple[str, ...], uid: str = "") -> Identity:
        """The identity a permitted ``Impersonate-User`` request acts as (groups as the authenticator adds them)."""
        extra: tuple[str, ...] = ()
        if username.startswith("system:serviceaccount:") and username.count(":") == 3:
            ns = username.split(":")[2]
            extra = ("system:serviceaccounts", f"system:serviceaccounts:{ns}")
        all_groups = tuple(dict.fromkeys((*groups, *extra)))
        if username != "system:anonymous" and "system:authenticated" not in all_groups:
            all_groups = (*all_groups, "system:authenticated")
        return Identity(username, all_groups, self.restricted, uid)


@functools.lru_cache(maxsize=256)  # a pure function: every exec lays out a pod's token file again
def issue_token(account: BoundAccount, issued_at: float, seconds: int, *, audiences: tuple[str, ...] = (TOKEN_ISSUER,),
                bound: BoundObject | None = None, node: BoundObject | None = None) -> tuple[str, float]:
    """A service-account token for ``account`` and when it expires: ``seconds`` after ``issued_at``, or a
    year for a pod-bound token asked for with the kubelet's 3607 s (``warnafter`` then says when it would
    have). A JWT as the API server issues it: RS256 with the cache folder's key (``service_account_key``),
    the claims of ``pkg/serviceaccount/claims.go``; the same request at the same simulated instant
    gives the same token, so an episode replays byte for byte."""
    expires, warn_after = issued_at + seconds, None
    if bound is not None and bound.kind == "Pod" and seconds == WARN_ONLY_EXPIRATION_SECONDS and audiences == (TOKEN_ISSUER,):
        expires, warn_after = issued_at + EXTENDED_EXPIRATION_SECONDS, issued_at + seconds
    private: dict[str, Any] = {"namespace": account.namespace, "serviceaccount": {"name": account.name, "uid": account.uid}}
    for obj in (bound, node):
        if obj is not None:
            private[obj.kind.lower()] = {"name": obj.name, "uid": obj.uid}
    if warn_after is not None:
        private["warnafter"] = int(warn_after)
    claims: dict[str, Any] = {"aud": list(audiences), "exp": int(expires), "iat": int(issued_at), "iss": TOKEN_ISSUER,
                              "kubernetes.io": dict(sorted(private.items())), "nbf": int(issued_at), "sub": account.username}
    claims["jti"] = str(uuid.UUID(bytes=hashlib.sha256(json.dumps(claims, sort_keys=True).encode()).digest()[:16], version=4))
    key = service_account_key()
    # the API server's claims are a JSON map (keys in order) and its header names no "typ"
    return jwt.encode(dict(sorted(claims.items())), key, algorithm="RS256", headers={"kid": _key_id(key), "typ": None}), expires


def kubelet_token_issued_at(started: float, now: float) -> float:
    """When the kubelet last asked for a pod's projected token: at the pod's start, then again each day
    (it renews at 80 % of the token's life or after 24 hours, and the pod's token lives a year)."""
    return started + max(0.0, (now - started) // TOKEN_RENEW_SECONDS) * TOKEN_RENEW_SECONDS


#: The kubelet's token manager renews a token after at most this long.
TOKEN_RENEW_SECONDS = 24 * 3600.0


@dataclass(frozen=True)
class TLSMaterial:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def server_context(self) -> ssl.SSLContext:
        """An SSLContext serving the 127.0.0.1 certificate (TLS 1.2+)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        with tempfile.TemporaryDirectory() as d:
            cert, key = Path(d, "tls.crt"), Path(d, "tls.key")
            cert.write_bytes(self.cert_pem + self.ca_pem)
            key.write_bytes(self.key_pem)
            os.chmod(key, 0o600)
            ctx.load_cert_chain(cert, key)
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


#: The cluster CA's folder under the cache folder (``paths.cache_dir``).
CA_FOLDER = "tls"
#: A stored CA this close to its end is replaced (its server certificates would outlive it).
CA_RENEW_BEFORE = datetime.timedelta(days=30)


def _validity(now: datetime.datetime) -> tuple[datetime.datetime, datetime.datetime]:
    """kubectl may run on the twin's simulated clock (which starts at SIM_EPOCH), so certificates
    must already be valid then, not only from the host's real "now"."""
    epoch = datetime.datetime.fromtimestamp(SIM_EPOCH, datetime.UTC)
    return min(now, epoch) - datetime.timedelta(days=1), now + datetime.timedelta(days=3650)


def _new_ca(now: datetime.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    not_before, not_after = _validity(now)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("itbench-gym-ca"))
        .issuer_name(_name("itbench-gym-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ca_cert, ca_key


_T = TypeVar("_T")
_PEM = serialization.Encoding.PEM


def _kept(names: tuple[str, ...], load: Callable[[list[bytes]], _T], make: Callable[[], tuple[_T, list[bytes]]]) -> _T:
    """What ``load`` makes of the files ``names`` in the cache folder's ``CA_FOLDER``, or ``make``'s,
    written there (files made again when missing or when ``load`` refuses them: ValueError); one
    process makes them while the others wait. Every file is readable by its owner only."""
    folder = cache_dir() / CA_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / "keys.lock")):
        try:
            return load([(folder / name).read_bytes() for name in names])
        except (OSError, ValueError) as unusable:  # none yet, or not what this code can use
            log.debug("making %s in %s again: %s", ", ".join(names), folder, unusable)
        made, contents = make()
        for name, data in zip(names, contents, strict=True):
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")  # created 0600
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, folder / name)
        return made


def _private_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(_PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _stored_ca(now: datetime.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The cluster CA kept in the cache folder (made when missing or near its end)."""
    def load(files: list[bytes]) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        cert, key = x509.load_pem_x509_certificate(files[0]), serialization.load_pem_private_key(files[1], password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey) or cert.public_key() != key.public_key() \
                or cert.not_valid_after_utc <= now + CA_RENEW_BEFORE:
            raise ValueError("not this cluster's CA")
        return cert, key

    def make() -> tuple[tuple[x509.Certificate, ec.EllipticCurvePrivateKey], list[bytes]]:
        cert, key = _new_ca(now)
        return (cert, key), [cert.public_bytes(_PEM), _private_pem(key)]

    return _kept(("ca.crt", "ca.key"), load, make)


@functools.cache
def service_account_key() -> rsa.RSAPrivateKey:
    """The key service-account tokens are signed with (kubeadm's ``sa.key``: RSA 2048), kept in the
    cache folder beside the CA so that every process using the folder issues and accepts the same
    tokens; a process that cannot keep it there makes its own."""
    def load(files: list[bytes]) -> rsa.RSAPrivateKey:
        key = serialization.load_pem_private_key(files[0], password=None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError("not an RSA key")
        return key

    def make() -> tuple[rsa.RSAPrivateKey, list[bytes]]:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return key, [_private_pem(key)]

    try:
        return _kept(("sa.key",), load, make)
    except OSError as exc:
        log.warning("cannot keep the service-account key in %s (%s); this process makes its own", cache_dir() / CA_FOLDER, exc)
        return make()[0]


def _key_id(key: rsa.RSAPrivateKey) -> str:
    """The ``kid`` header the API server gives its tokens: the URL-safe SHA-256 of the public key's DER."""
    der = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.urlsafe_b64encode(hashlib.sha256(der).digest()).decode().rstrip("=")


@functools.cache
def tls_material() -> TLSMaterial:
    """The cluster's CA and a server certificate for 127.0.0.1/localhost signed by it.

    The CA is the cache folder's (``CA_FOLDER``), shared by every process that uses the folder: the
    ``kube-root-ca.crt`` ConfigMaps of a shared baseline stored there must name the CA that signs the
    API server's certificate in whichever process restores it. Where the folder cannot be written the
    process makes a CA of its own. The server's key is made once per process and never stored.
    """
    now = datetime.datetime.now(datetime.UTC)
    try:
        ca_cert, ca_key = _stored_ca(now)
    except OSError as exc:
        log.warning("cannot keep the cluster CA in %s (%s); this process makes its own", cache_dir() / CA_FOLDER, exc)
        ca_cert, ca_key = _new_ca(now)
    not_before, not_after = _validity(now)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("kube-apiserver"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(min(not_after, ca_cert.not_valid_after_utc))
        .add_extension(x509.SubjectAlternativeName([
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes.default.svc"),
        ]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return TLSMaterial(
        ca_pem=ca_cert.public_bytes(pem),
        cert_pem=cert.public_bytes(pem),
        key_pem=key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )
