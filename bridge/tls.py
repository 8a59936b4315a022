"""The `mtls:` listening endpoint: Twisted's `ssl:` plus client certificates (mutual TLS).

Twisted's own `ssl:PORT:privateKey=KEY:certKey=CERT` endpoint string serves TLS but has no
way to ask clients for a certificate. `mtls:` takes the same arguments and two more:

    caCerts=FILE        PEM file of the certificate authorities whose client certificates
                        are accepted (without it: no client certificate is asked for)
    clientCert=require  with caCerts: `require` (the default; a client without a valid
                        certificate fails the handshake) or `optional` (a client may show
                        none and is then anonymous: docs/security.md)

It is a Twisted endpoint parser plugin (twisted/plugins/mqksbridge_plugin.py), so every
configuration key that takes endpoint strings (mqks.listen, twino.listen, admin.listen)
takes it, and config validation builds it (missing or bad files fail at start).
"""
from twisted.internet import interfaces, ssl
from twisted.internet.endpoints import SSL4ServerEndpoint
from twisted.plugin import IPlugin
from twisted.python.filepath import FilePath
from zope.interface import implementer

CLIENT_CERT = ("require", "optional")


def _certificates(path):
    """Every certificate of a PEM file, as pyOpenSSL X509 objects (CertificateOptions)."""
    from cryptography import x509
    from OpenSSL.crypto import X509
    found = x509.load_pem_x509_certificates(FilePath(path).getContent())
    return [X509.from_cryptography(cert) for cert in found]


def context_factory(privateKey, certKey=None, caCerts=None, clientCert="require",
                    extraCertChain=None, dhParameters=None):
    """The server's CertificateOptions; ValueError for an option out of range."""
    if clientCert not in CLIENT_CERT:
        raise ValueError(f"clientCert must be one of {', '.join(CLIENT_CERT)}")
    certificate = ssl.PrivateCertificate.loadPEM(
        FilePath(certKey or privateKey).getContent() + b"\n"
        + FilePath(privateKey).getContent())
    options = {}
    if extraCertChain:
        options["extraCertChain"] = _certificates(extraCertChain)
    if dhParameters:
        options["dhParameters"] = ssl.DiffieHellmanParameters.fromFile(FilePath(dhParameters))
    if caCerts:
        options.update(verify=True, caCerts=_certificates(caCerts),
                       requireCertificate=clientCert == "require")
    return ssl.CertificateOptions(privateKey=certificate.privateKey.original,
                                  certificate=certificate.original, **options)


@implementer(IPlugin, interfaces.IStreamServerEndpointStringParser)
class TLSServerParser:
    prefix = "mtls"               # (Twisted's own `tls:` serves a directory of PEMs by SNI)

    def parseStreamServer(self, reactor, port, privateKey="server.pem", certKey=None,
                          caCerts=None, clientCert="require", interface="", backlog=50,
                          extraCertChain=None, dhParameters=None):
        factory = context_factory(privateKey, certKey, caCerts, clientCert, extraCertChain,
                                  dhParameters)
        return SSL4ServerEndpoint(reactor, int(port), factory, backlog=int(backlog),
                                  interface=interface)


parser = TLSServerParser()
