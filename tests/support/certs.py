"""Test certificates made at test time (no keys in the repository): one CA, a server
certificate for 127.0.0.1/localhost, and client certificates it signs."""
import datetime
import ipaddress
import ssl

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _issue(subject_cn, issuer_cn, issuer_key, key, ca=False, sans=()):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject_cn))
               .issuer_name(_name(issuer_cn)).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(days=1))
               .not_valid_after(now + datetime.timedelta(days=30))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert):
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class Certificates:
    """Files under `directory`: ca.pem, server.pem/server.key, and client_NAME.pem/.key
    made by `client(NAME)` (its CN is NAME), or by another CA with `other_ca=True`."""

    def __init__(self, directory):
        self.dir = directory
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        self.ca = _issue("mqksbridge test CA", "mqksbridge test CA", self.ca_key, self.ca_key,
                         ca=True)
        self.ca_file = self._write("ca.pem", _pem(self.ca))
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue("localhost", "mqksbridge test CA", self.ca_key, key,
                      sans=[x509.DNSName("localhost"),
                            x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        self.server_cert = self._write("server.pem", _pem(cert))
        self.server_key = self._write("server.key", _key_pem(key))

    def _write(self, name, data):
        path = self.dir / name
        path.write_bytes(data)
        return str(path)

    def client(self, cn, other_ca=False):
        """(certificate file, key file) of a client certificate with CN `cn`."""
        key = ec.generate_private_key(ec.SECP256R1())
        issuer_key = ec.generate_private_key(ec.SECP256R1()) if other_ca else self.ca_key
        cert = _issue(cn, "mqksbridge test CA", issuer_key, key)
        return (self._write(f"client_{cn}.pem", _pem(cert)),
                self._write(f"client_{cn}.key", _key_pem(key)))

    def endpoint(self, kind="ssl", ca=False, client_cert="require"):
        """A loopback endpoint string on an ephemeral port serving the server certificate."""
        if ca:
            return (f"mtls:0:interface=127.0.0.1:privateKey={self.server_key}"
                    f":certKey={self.server_cert}:caCerts={self.ca_file}"
                    f":clientCert={client_cert}")
        return f"{kind}:0:interface=127.0.0.1:privateKey={self.server_key}" \
               f":certKey={self.server_cert}"

    def context(self, client=None):
        """A client ssl.SSLContext trusting the CA (with a client certificate if given)."""
        context = ssl.create_default_context(cafile=self.ca_file)
        if client is not None:
            context.load_cert_chain(*client)
        return context
