#include "common/certificate_authority.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

namespace kubeps {
namespace {

// Every replica's URI starts here (JobUriPrefix).
constexpr const char* kUriStart = "spiffe://kubeps.io/ns/";

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using BioPtr = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using BignumPtr = std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using ExtensionPtr = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION, X509_EXTENSION_free>>;
using NamesPtr = std::unique_ptr<GENERAL_NAMES, Deleter<GENERAL_NAMES, GENERAL_NAMES_free>>;
using NamePtr = std::unique_ptr<GENERAL_NAME, Deleter<GENERAL_NAME, GENERAL_NAME_free>>;
using Ia5Ptr = std::unique_ptr<ASN1_IA5STRING, Deleter<ASN1_IA5STRING, ASN1_IA5STRING_free>>;

constexpr long kClockSkewSeconds = 5 * 60;
constexpr size_t kMaxCommonName = 64;  // ub-common-name (RFC 5280)

// Takes the first error OpenSSL queued (usually the cause, later ones are
// the callers' view of it) and clears the rest, so that they do not end up
// in an unrelated message of a later call on this thread.
std::string OpenSslReason() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "no reason given by OpenSSL";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

Status OpenSslError(const std::string& what) {
  return Status::Internal(what + ": " + OpenSslReason());
}

// URI path segments without escaping: RFC 3986's unreserved characters,
// which every Kubernetes name is made of.
Status CheckSegment(const std::string& value, const std::string& what) {
  if (value.empty()) return Status::InvalidArgument(what + " is empty");
  for (char c : value) {
    const bool unreserved = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
    if (!unreserved)
      return Status::InvalidArgument(what + " \"" + value + "\" holds a character a URI cannot");
  }
  return Status::Ok();
}

// A CN is informational (the URI is what peers check) and X.509 caps it at
// 64 characters, which a long job name would pass.
std::string CommonName(const std::string& name) { return name.substr(0, kMaxCommonName); }

Status NewKey(const std::string& what, KeyPtr* key) {
  key->reset(EVP_EC_gen("P-256"));
  if (!*key) return OpenSslError("making the key of " + what);
  return Status::Ok();
}

// The fields a CA and a replica certificate share. `issuer` is null for a
// self-signed certificate; otherwise notAfter is clipped to the issuer's, as
// a chain is only as valid as its shortest link.
Status NewCertificate(const std::string& what, const std::string& common_name, EVP_PKEY* key,
                      X509* issuer, std::chrono::seconds validity, X509Ptr* out) {
  X509Ptr cert(X509_new());
  BignumPtr serial(BN_new());
  X509_NAME* subject = cert ? X509_get_subject_name(cert.get()) : nullptr;
  if (!cert || !serial || !X509_set_version(cert.get(), X509_VERSION_3) ||
      !BN_rand(serial.get(), 128, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) ||
      !BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) ||
      !X509_NAME_add_entry_by_NID(subject, NID_commonName, MBSTRING_UTF8,
                                  reinterpret_cast<const unsigned char*>(common_name.data()),
                                  static_cast<int>(common_name.size()), -1, 0) ||
      !X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : subject) ||
      !X509_set_pubkey(cert.get(), key) ||
      !X509_gmtime_adj(X509_getm_notBefore(cert.get()), -kClockSkewSeconds) ||
      !X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(validity.count())))
    return OpenSslError("making " + what);
  if (issuer && ASN1_TIME_compare(X509_get0_notAfter(cert.get()), X509_get0_notAfter(issuer)) > 0 &&
      !X509_set1_notAfter(cert.get(), X509_get0_notAfter(issuer)))
    return OpenSslError("making " + what);
  *out = std::move(cert);
  return Status::Ok();
}

Status AddExtension(const std::string& what, X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  ExtensionPtr extension(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  if (!extension || !X509_add_ext(cert, extension.get(), -1))
    return OpenSslError(std::string("adding ") + OBJ_nid2sn(nid) + " to " + what);
  return Status::Ok();
}

// Built by hand rather than from an OpenSSL config string, where a ',' in a
// name would start another entry.
Status AddSubjectAltNames(const std::string& what, X509* cert, const std::string& uri,
                          const std::vector<std::string>& dns_names) {
  NamesPtr names(GENERAL_NAMES_new());
  if (!names) return OpenSslError("naming " + what);
  auto add = [&](int type, const std::string& value) {
    NamePtr name(GENERAL_NAME_new());
    Ia5Ptr text(ASN1_IA5STRING_new());
    if (!name || !text ||
        !ASN1_STRING_set(text.get(), value.data(), static_cast<int>(value.size())))
      return false;
    GENERAL_NAME_set0_value(name.get(), type, text.release());
    if (!sk_GENERAL_NAME_push(names.get(), name.get())) return false;
    name.release();  // owned by `names` now
    return true;
  };
  bool added = add(GEN_URI, uri);
  for (const std::string& dns : dns_names) added = added && add(GEN_DNS, dns);
  if (!added || !X509_add1_ext_i2d(cert, NID_subject_alt_name, names.get(), 0, X509V3_ADD_DEFAULT))
    return OpenSslError("adding subjectAltName to " + what);
  return Status::Ok();
}

Status Sign(const std::string& what, X509* cert, EVP_PKEY* key) {
  if (X509_sign(cert, key, EVP_sha256()) <= 0) return OpenSslError("signing " + what);
  return Status::Ok();
}

Status BioText(BIO* bio, std::string* text) {
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  if (size <= 0 || data == nullptr) return Status::Internal("no PEM text was written");
  text->assign(data, static_cast<size_t>(size));
  return Status::Ok();
}

Status WritePem(const std::string& what, X509* cert, EVP_PKEY* key, CertificateAndKey* out) {
  BioPtr cert_bio(BIO_new(BIO_s_mem()));
  // Secure memory: OpenSSL wipes the key's PEM text when it frees it.
  BioPtr key_bio(BIO_new(BIO_s_secmem()));
  if (!cert_bio || !key_bio || !PEM_write_bio_X509(cert_bio.get(), cert) ||
      !PEM_write_bio_PrivateKey(key_bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr))
    return OpenSslError("writing the PEM text of " + what);
  CertificateAndKey pem;
  if (Status s = BioText(cert_bio.get(), &pem.certificate_pem); !s.ok()) return s;
  if (Status s = BioText(key_bio.get(), &pem.private_key_pem); !s.ok()) return s;
  *out = std::move(pem);
  return Status::Ok();
}

BioPtr ReadBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

Status ReadCertificate(const std::string& pem, const std::string& what, X509Ptr* cert) {
  BioPtr bio = ReadBio(pem);
  if (bio) cert->reset(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!bio || !*cert)
    return Status::InvalidArgument(what +
                                   " does not parse as a PEM certificate: " + OpenSslReason());
  return Status::Ok();
}

Status ReadCa(const CertificateAndKey& ca, X509Ptr* cert, KeyPtr* key) {
  if (Status s = ReadCertificate(ca.certificate_pem, "the CA's certificate", cert); !s.ok())
    return s;
  BioPtr bio = ReadBio(ca.private_key_pem);
  if (bio) key->reset(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!bio || !*key)
    return Status::InvalidArgument("the CA's private key does not parse as PEM: " +
                                   OpenSslReason());
  if (X509_check_private_key(cert->get(), key->get()) != 1)
    return Status::InvalidArgument("the CA's private key is not its certificate's: " +
                                   OpenSslReason());
  if (X509_check_ca(cert->get()) != 1)
    return Status::InvalidArgument("the CA's certificate is not a CA's (no CA:TRUE)");
  if (X509_cmp_current_time(X509_get0_notAfter(cert->get())) <= 0)
    return Status::FailedPrecondition("the CA has expired: make the job a new one");
  return Status::Ok();
}

}  // namespace

std::string JobUriPrefix(const std::string& namespace_, const std::string& job) {
  return kUriStart + namespace_ + "/job/" + job + "/";
}

std::string JobUriPrefixOf(const std::string& uri) {
  if (uri.rfind(kUriStart, 0) != 0) return "";
  const size_t job = uri.find("/job/");
  if (job == std::string::npos) return "";
  const size_t end = uri.find('/', job + 5);
  if (end == std::string::npos || end == job + 5) return "";
  return uri.substr(0, end + 1);
}

std::string ReplicaUri(const ReplicaIdentity& id) {
  return JobUriPrefix(id.namespace_, id.job) + id.role + "/" + std::to_string(id.index);
}

Status CreateJobCa(const std::string& namespace_, const std::string& job,
                   std::chrono::seconds validity, CertificateAndKey* ca) {
  if (Status s = CheckSegment(namespace_, "the job's namespace"); !s.ok()) return s;
  if (Status s = CheckSegment(job, "the job's name"); !s.ok()) return s;
  if (validity.count() <= 0) return Status::InvalidArgument("the CA's validity is not positive");
  const std::string what = "the CA of " + namespace_ + "/" + job;
  KeyPtr key;
  X509Ptr cert;
  if (Status s = NewKey(what, &key); !s.ok()) return s;
  if (Status s = NewCertificate(what, CommonName("kubeps " + namespace_ + "/" + job + " CA"),
                                key.get(), nullptr, validity, &cert);
      !s.ok())
    return s;
  X509* c = cert.get();
  if (Status s = AddExtension(what, c, c, NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
      !s.ok())
    return s;
  if (Status s = AddExtension(what, c, c, NID_key_usage, "critical,keyCertSign,cRLSign"); !s.ok())
    return s;
  // Lets a verifier pick this CA by the authorityKeyIdentifier of what it signs.
  if (Status s = AddExtension(what, c, c, NID_subject_key_identifier, "hash"); !s.ok()) return s;
  if (Status s = Sign(what, c, key.get()); !s.ok()) return s;
  return WritePem(what, c, key.get(), ca);
}

Status IssueReplicaCertificate(const CertificateAndKey& ca, const ReplicaIdentity& id,
                               const std::vector<std::string>& dns_names,
                               std::chrono::seconds validity, CertificateAndKey* out) {
  if (Status s = CheckSegment(id.namespace_, "the replica's namespace"); !s.ok()) return s;
  if (Status s = CheckSegment(id.job, "the replica's job"); !s.ok()) return s;
  if (Status s = CheckSegment(id.role, "the replica's role"); !s.ok()) return s;
  if (id.index < 0) return Status::InvalidArgument("the replica's index is negative");
  const std::string name = id.job + "-" + id.role + "-" + std::to_string(id.index);
  for (const std::string& dns : dns_names) {
    if (dns.empty() ||
        dns.find_first_not_of("abcdefghijklmnopqrstuvwxyz"
                              "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.*") != std::string::npos)
      return Status::InvalidArgument("DNS name \"" + dns + "\" of " + name + " is not one");
  }
  if (validity.count() <= 0)
    return Status::InvalidArgument("the validity of " + name + "'s certificate is not positive");
  X509Ptr ca_cert;
  KeyPtr ca_key;
  if (Status s = ReadCa(ca, &ca_cert, &ca_key); !s.ok()) return s;

  const std::string what = "the certificate of " + name;
  KeyPtr key;
  X509Ptr cert;
  if (Status s = NewKey(what, &key); !s.ok()) return s;
  if (Status s = NewCertificate(what, CommonName(name), key.get(), ca_cert.get(), validity, &cert);
      !s.ok())
    return s;
  X509* c = cert.get();
  X509* issuer = ca_cert.get();
  if (Status s = AddExtension(what, c, issuer, NID_basic_constraints, "critical,CA:FALSE"); !s.ok())
    return s;
  if (Status s = AddExtension(what, c, issuer, NID_key_usage, "critical,digitalSignature"); !s.ok())
    return s;
  if (Status s = AddExtension(what, c, issuer, NID_ext_key_usage, "serverAuth,clientAuth"); !s.ok())
    return s;
  if (Status s = AddExtension(what, c, issuer, NID_subject_key_identifier, "hash"); !s.ok())
    return s;
  if (Status s = AddExtension(what, c, issuer, NID_authority_key_identifier, "keyid:always");
      !s.ok())
    return s;
  if (Status s = AddSubjectAltNames(what, c, ReplicaUri(id), dns_names); !s.ok()) return s;
  if (Status s = Sign(what, c, ca_key.get()); !s.ok()) return s;
  return WritePem(what, c, key.get(), out);
}

Status CertificateUris(const std::string& certificate_pem, std::vector<std::string>* uris) {
  X509Ptr cert;
  if (Status s = ReadCertificate(certificate_pem, "the certificate", &cert); !s.ok()) return s;
  int critical = 0;
  NamesPtr names(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert.get(), NID_subject_alt_name, &critical, nullptr)));
  if (!names && critical == -2)
    return Status::InvalidArgument("the certificate has more than one subjectAltName");
  if (!names && critical >= 0)
    return Status::InvalidArgument("the certificate's subjectAltName does not parse: " +
                                   OpenSslReason());
  ERR_clear_error();
  std::vector<std::string> found;
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    if (name->type != GEN_URI) continue;
    const ASN1_IA5STRING* uri = name->d.uniformResourceIdentifier;
    found.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(uri)),
                       static_cast<size_t>(ASN1_STRING_length(uri)));
  }
  *uris = std::move(found);
  return Status::Ok();
}

}  // namespace kubeps
