"""Credentials and visibility for the twin's Kubernetes API.

kubectl only sends bearer tokens over TLS, so the twin serves HTTPS with a self-signed CA generated
once per process (EC P-256 keys are cheap). Two tokens exist: the admin's (the harness and fault
injection; a member of ``system:masters``, so RBAC always allows it and it sees everything) and
the agent's, which authenticates as the ServiceAccount ITBench creates for its agent
(``agent-rbac.yaml``). What the agent may do is decided by RBAC over the store's RBAC objects
(``rbac.py``); ``Visibility`` hides what RBAC cannot express: an API group's presence in
discovery and OpenAPI, and objects (Events about hidden things, hidden namespaces' contents) that
a broad grant would otherwise list. Every identity but the admin — the agent and anyone reached by
impersonation — gets the restricted visibility.
"""

from __future__ import annotations

import datetime
import functools
import hmac
import ipaddress
import os
import secrets
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from itbench_gym.backends.rbac import agent_service_account
from itbench_gym.clock import SIM_EPOCH

from . import errors
from .rbac import PRIVILEGED_GROUP


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


class Auth:
    """Bearer-token authentication with two fixed identities (admin, agent)."""

    def __init__(self, agent_visibility: Visibility = EVERYTHING, *, admin_token: str | None = None,
                 agent_token: str | None = None) -> None:
        self.admin_token = admin_token or secrets.token_urlsafe(32)
        self.agent_token = agent_token or secrets.token_urlsafe(32)
        #: What every identity but the admin sees (the agent, impersonated users).
        self.restricted = agent_visibility
        self.admin = Identity(ADMIN_USER, (PRIVILEGED_GROUP, "system:authenticated"))
        sa = agent_service_account()
        self.agent = Identity(sa.username, sa.groups, agent_visibility)
        #: Tokens a TokenRequest issued: token -> (the ServiceAccount it is bound to, expiry).
        self._issued: dict[str, tuple[BoundAccount, float]] = {}

    def issue(self, account: BoundAccount, expires_at: float) -> str:
        """A new token for a ServiceAccount (the ``serviceaccounts/token`` subresource)."""
        token = secrets.token_urlsafe(32)
        self._issued[token] = (account, expires_at)
        return token

    def authenticate(self, authorization: str | None, now: float | None = None,
                     account_uid: Callable[[str, str], str | None] | None = None) -> Identity:
        """The identity behind an ``Authorization`` header; 401 Unauthorized otherwise.

        An issued token is valid until it expires (at ``now``) and while the ServiceAccount it was
        bound to still exists with the same uid (``account_uid`` looks it up), as bound tokens are.
        """
        if authorization:
            scheme, _, token = authorization.partition(" ")
            token = token.strip()
            if scheme.lower() == "bearer" and token:
                if hmac.compare_digest(token, self.admin_token):
                    return self.admin
                if hmac.compare_digest(token, self.agent_token):
                    return self.agent
                issued = self._issued.get(token)
                if issued is not None:
                    account, expires_at = issued
                    alive = account_uid is None or account_uid(account.namespace, account.name) == account.uid
                    if alive and (now is None or now < expires_at):
                        return self.impersonated(account.username, ())
                    del self._issued[token]
        raise errors.unauthorized()

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


@functools.cache
def tls_material() -> TLSMaterial:
    """A CA and a server certificate for 127.0.0.1/localhost, generated once per process."""
    now = datetime.datetime.now(datetime.UTC)
    # kubectl may run on the twin's simulated clock (which starts at SIM_EPOCH), so the
    # certificates must already be valid then, not only from the host's real "now".
    epoch = datetime.datetime.fromtimestamp(SIM_EPOCH, datetime.UTC)
    not_before, not_after = min(now, epoch) - datetime.timedelta(days=1), now + datetime.timedelta(days=3650)
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
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("kube-apiserver"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
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
