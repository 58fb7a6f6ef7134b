"""A stand-in for cert-manager v1.x's controller, run in the test process:
what the operator's cert-manager support meets on a cluster that serves
cert-manager.io/v1 (install tests/k8s/crds/cert-manager.io_*.yaml first).

    cm = CertManager(cluster, issue_delay=0.3).start()
    ...
    cm.renew("default", "my-cert")     # what `cmctl renew` does
    cm.issued                          # [(time, namespace, certificate, revision)]
    cm.stop()

It watches Issuers, Certificates and Secrets in all namespaces with the
cluster's admin client (list, then watch from the list's resourceVersion,
as an informer does) and plays the parts of cert-manager's controllers:

- issuers: Ready True "IsReady" for a SelfSigned Issuer; for a CA Issuer
  Ready True "KeyPairVerified" ("Signing CA verified") once its Secret holds
  a CA certificate (basicConstraints CA:TRUE) and a key, else Ready False
  "ErrGetKeyPair" / "ErrInvalidKeyPair" with cert-manager's messages
  ('Error getting keypair for CA issuer: secrets "X" not found'). Issuers of
  other types (acme, vault, venafi) are left alone: they never get Ready.
- certificates-trigger: sets Issuing True (reason and message of the first
  failed check, as cert-manager's trigger policy chain words them) when the
  Secret does not exist (DoesNotExist), lacks data (MissingData), holds a key
  that does not match its certificate (InvalidKeyPair) or the spec's
  privateKey (SecretMismatch), was issued by another issuer (IncorrectIssuer:
  the cert-manager.io/issuer-* annotations) or for another Certificate
  (IncorrectCertificate), when the spec changed since the issuance
  (RequestChanged) or when the renewal time has passed (Renewing). An
  Issuing condition someone else set True (`cmctl renew`: ManuallyTriggered)
  starts an issuance the same way. After a failed issuance it backs off
  1h * 2^(failedIssuanceAttempts-1), as cert-manager does.
- certificates-key-manager: the next private key per spec.privateKey (RSA
  2048 by default, as cert-manager; ECDSA 256/384/521, Ed25519), a new one
  at every issuance with rotationPolicy Always (the default since 1.18), the
  Secret's key again with Never; kept in a temporary Secret "<name>-xxxxx"
  (label cert-manager.io/next-private-key, owned by the Certificate) named
  in status.nextPrivateKeySecretName, deleted after the issuance.
- certificates-request-manager and the issuer's signer: the request (not
  stored as a CertificateRequest object: see pending()) is signed
  `issue_delay` seconds after it was made, once its Issuer exists and is
  Ready: X.509 v3 with a random 128-bit serial, notBefore now, notAfter now
  + spec.duration (2160h by default), the subject (commonName, subject.*),
  the SANs (dnsNames, emailAddresses, ipAddresses, uris; critical when the
  subject is empty), basicConstraints (critical, CA:TRUE for isCA), key
  usages from spec.usages (default "digital signature", "key encipherment";
  "cert sign" added for isCA, as cert-manager does: no cRLSign), extended
  key usages ("server auth" -> serverAuth, "client auth" -> clientAuth, ...),
  a subject key identifier on CA certificates, an authority key identifier
  on CA-signed ones, the issuer's CRL distribution points and AIA URLs.
  SelfSigned signs with the certificate's own key (ca.crt: the certificate
  itself); CA signs with its Secret's tls.key (tls.crt: the leaf and any
  intermediates of the CA's tls.crt; ca.crt: the root-most certificate).
- certificates-issuing: writes the Secret (type kubernetes.io/tls; tls.crt,
  tls.key in spec.privateKey.encoding, PKCS1 by default, ca.crt, and the
  additionalOutputFormats key.der / tls-combined.pem), annotated
  cert-manager.io/certificate-name, issuer-name, issuer-kind, issuer-group,
  common-name, alt-names, ip-sans, uri-sans (and email-sans, subject-* when
  set), labelled controller.cert-manager.io/fao=true, with the
  secretTemplate's labels and annotations. As cert-manager's server-side
  apply does, it keeps whatever others added to an existing Secret (owner
  references, labels, annotations, data keys) and removes only what it set
  before and no longer sets; updates are PUTs carrying the resourceVersion
  read, retried on 409. No ownerReferences (cert-manager's default; pass
  owner_ref=True for --enable-certificate-owner-ref). Then the status:
  revision + 1, the Issuing condition removed, lastFailureTime cleared.
- certificates-readiness: Ready True "Ready" ("Certificate is up to date and
  has not expired") or Ready False with the first failed check (DoesNotExist,
  MissingData, InvalidKeyPair, RequestChanged, Expired); notBefore, notAfter
  and renewalTime (notAfter - renewBefore, default a third of the lifetime)
  from the Secret's certificate.
- secret metadata: a Secret missing cert-manager's annotations or labels, or
  out of step with the secretTemplate, gets them back without a new
  certificate.
- Events on the Certificate as cert-manager records them (Issuing,
  Generated, Reused, Requested, Issuing "The certificate has been
  successfully issued", Failed), from cert-manager-certificates-<part>.
A deleted Certificate leaves its Secret alone.

Not mimicked: ClusterIssuers, CertificateRequest objects (and their
approval), the ACME, Vault and Venafi issuers, the admission webhook (no
validation beyond the CRD schema: a duration under 1h is honoured, so tests
can see renewals), keystores, nameConstraints, otherNames, literalSubject,
signatureAlgorithm (the digest follows the signing key), the temporary
certificate annotation, ingress-shim, metrics, leader election.

The package's modules, by subject:

- common: the constants (API paths, annotations, usages) and small helpers
  (times, durations, base64, PEM, conditions, issuer references);
- openssl_cli: the openssl CLI: private keys, reading certificates,
  signing, chains;
- informer: the list-then-watch caches of Issuers, Certificates, Secrets;
- checks: the Secret's key pair as read, the trigger ("why issue") and
  readiness policy chains, the renewal time, the failure back-off;
- key_manager: the next private key, its temporary Secret, the request in
  flight, failures;
- issuing: the signer (the Issuer and its CA), signing the request and the
  status after an issuance;
- secret_writer: the Secret's data, labels and annotations, applied as
  cert-manager's server-side apply does;
- controller: CertManager (the loop over the caches, the Issuers, the
  Certificate pass, Events) and cmctl_renew.
"""
from emulator.clock import parse_time

from .common import (API, CERTIFICATES, GROUP, ISSUERS, SECRETS, condition, parse_duration,
                     set_condition)
from .controller import CertManager, cmctl_renew
from .informer import Informer
from .openssl_cli import OpensslError

__all__ = ["API", "CERTIFICATES", "GROUP", "ISSUERS", "SECRETS", "CertManager", "Informer",
           "OpensslError", "cmctl_renew", "condition", "parse_duration", "parse_time",
           "set_condition"]
