// The job's CA (common/certificate_authority.h), checked with OpenSSL itself:
// a replica's certificate verifies against its own CA for both TLS roles and
// not against another job's, names what the header says, ends no later than
// its CA, matches its key; the CA is a CA; bad input is an error saying so.
#include "common/certificate_authority.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <chrono>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

namespace kubeps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace std::chrono_literals;

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using StorePtr = std::unique_ptr<X509_STORE, Deleter<X509_STORE, X509_STORE_free>>;
using StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, Deleter<X509_STORE_CTX, X509_STORE_CTX_free>>;
using NamesPtr = std::unique_ptr<GENERAL_NAMES, Deleter<GENERAL_NAMES, GENERAL_NAMES_free>>;
using ConstraintsPtr =
    std::unique_ptr<BASIC_CONSTRAINTS, Deleter<BASIC_CONSTRAINTS, BASIC_CONSTRAINTS_free>>;

X509Ptr ParseCertificate(const std::string& pem) {
  std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return X509Ptr(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

KeyPtr ParseKey(const std::string& pem) {
  std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return KeyPtr(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
}

// "" when `cert` verifies against `ca` alone for `purpose`, else OpenSSL's reason.
std::string Verify(const std::string& ca_pem, const std::string& cert_pem, int purpose) {
  X509Ptr ca = ParseCertificate(ca_pem);
  X509Ptr cert = ParseCertificate(cert_pem);
  StorePtr store(X509_STORE_new());
  StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (!ca || !cert || !store || !ctx || !X509_STORE_add_cert(store.get(), ca.get()) ||
      !X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) ||
      !X509_STORE_CTX_set_purpose(ctx.get(), purpose))
    return "setting up the verification failed";
  if (X509_verify_cert(ctx.get()) == 1) return "";
  return X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()));
}

std::vector<std::string> SubjectAltNames(X509* cert, int type) {
  NamesPtr names(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr)));
  std::vector<std::string> found;
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    if (name->type != type) continue;
    const ASN1_IA5STRING* text = name->d.ia5;
    found.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(text)),
                       static_cast<size_t>(ASN1_STRING_length(text)));
  }
  return found;
}

std::string CommonNameOf(X509* cert) {
  char cn[256] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof(cn));
  return cn;
}

bool Critical(X509* cert, int nid) {
  const int at = X509_get_ext_by_NID(cert, nid, -1);
  return at >= 0 && X509_EXTENSION_get_critical(X509_get_ext(cert, at)) == 1;
}

std::time_t ToTime(const ASN1_TIME* t) {
  std::tm tm = {};
  EXPECT_EQ(ASN1_TIME_to_tm(t, &tm), 1);
  return timegm(&tm);
}

class CertificateAuthorityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(CreateJobCa("team-a", "mnist", 24h, &ca_).ok());
    ASSERT_TRUE(IssueReplicaCertificate(ca_, server0_, kDnsNames, 1h, &replica_).ok());
  }

  const ReplicaIdentity server0_{"team-a", "mnist", "server", 0};
  const std::vector<std::string> kDnsNames{"mnist-server-0.mnist.team-a.svc",
                                           "mnist-server-0.mnist.team-a.svc.cluster.local"};
  CertificateAndKey ca_;
  CertificateAndKey replica_;
};

TEST_F(CertificateAuthorityTest, UrisNameTheJobRoleAndIndex) {
  EXPECT_EQ(JobUriPrefix("team-a", "mnist"), "spiffe://kubeps.io/ns/team-a/job/mnist/");
  EXPECT_EQ(ReplicaUri(server0_), "spiffe://kubeps.io/ns/team-a/job/mnist/server/0");
  EXPECT_EQ(JobUriPrefixOf(ReplicaUri(server0_)), JobUriPrefix("team-a", "mnist"));
  for (const char* not_a_replica :
       {"", "spiffe://kubeps.io/ns/team-a", "spiffe://kubeps.io/ns/team-a/job//server/0",
        "spiffe://other.io/ns/team-a/job/mnist/server/0", "https://kubeps.io/ns/a/job/b/c/0"})
    EXPECT_EQ(JobUriPrefixOf(not_a_replica), "") << not_a_replica;
}

TEST_F(CertificateAuthorityTest, ReplicaVerifiesAgainstItsCaAsClientAndServer) {
  EXPECT_EQ(Verify(ca_.certificate_pem, replica_.certificate_pem, X509_PURPOSE_SSL_CLIENT), "");
  EXPECT_EQ(Verify(ca_.certificate_pem, replica_.certificate_pem, X509_PURPOSE_SSL_SERVER), "");
}

TEST_F(CertificateAuthorityTest, ReplicaDoesNotVerifyAgainstAnotherJobsCa) {
  CertificateAndKey other;
  ASSERT_TRUE(CreateJobCa("team-a", "resnet", 24h, &other).ok());
  EXPECT_NE(Verify(other.certificate_pem, replica_.certificate_pem, X509_PURPOSE_SSL_CLIENT), "");
  EXPECT_NE(Verify(other.certificate_pem, replica_.certificate_pem, X509_PURPOSE_SSL_SERVER), "");
  // Same job name, another namespace, another CA: still refused.
  ASSERT_TRUE(CreateJobCa("team-b", "mnist", 24h, &other).ok());
  EXPECT_NE(Verify(other.certificate_pem, replica_.certificate_pem, X509_PURPOSE_SSL_SERVER), "");
}

TEST_F(CertificateAuthorityTest, ReplicaCertificateNamesWhatTheHeaderSays) {
  X509Ptr cert = ParseCertificate(replica_.certificate_pem);
  ASSERT_TRUE(cert);
  EXPECT_THAT(SubjectAltNames(cert.get(), GEN_URI),
              ElementsAre("spiffe://kubeps.io/ns/team-a/job/mnist/server/0"));
  EXPECT_EQ(SubjectAltNames(cert.get(), GEN_DNS), kDnsNames);
  EXPECT_EQ(CommonNameOf(cert.get()), "mnist-server-0");
  EXPECT_EQ(X509_check_ca(cert.get()), 0);
  ConstraintsPtr constraints(static_cast<BASIC_CONSTRAINTS*>(
      X509_get_ext_d2i(cert.get(), NID_basic_constraints, nullptr, nullptr)));
  ASSERT_TRUE(constraints);
  EXPECT_FALSE(constraints->ca);
  EXPECT_EQ(X509_get_extended_key_usage(cert.get()) & (XKU_SSL_SERVER | XKU_SSL_CLIENT),
            XKU_SSL_SERVER | XKU_SSL_CLIENT);
  EXPECT_EQ(X509_get_key_usage(cert.get()), static_cast<uint32_t>(KU_DIGITAL_SIGNATURE));
  EXPECT_TRUE(Critical(cert.get(), NID_key_usage));
  EXPECT_NE(X509_get0_subject_key_id(cert.get()), nullptr);
  EXPECT_NE(X509_get0_authority_key_id(cert.get()), nullptr);
  EXPECT_EQ(X509_get_version(cert.get()), X509_VERSION_3);
}

TEST_F(CertificateAuthorityTest, ValidityStartsInThePastAndEndsAfterTheAskedTime) {
  X509Ptr cert = ParseCertificate(replica_.certificate_pem);
  ASSERT_TRUE(cert);
  const std::time_t now = std::time(nullptr);
  EXPECT_NEAR(static_cast<double>(ToTime(X509_get0_notBefore(cert.get()))), now - 300, 60);
  EXPECT_NEAR(static_cast<double>(ToTime(X509_get0_notAfter(cert.get()))), now + 3600, 60);
}

TEST_F(CertificateAuthorityTest, ReplicaNeverOutlivesItsCa) {
  CertificateAndKey short_ca, replica;
  ASSERT_TRUE(CreateJobCa("team-a", "mnist", 1h, &short_ca).ok());
  ASSERT_TRUE(IssueReplicaCertificate(short_ca, server0_, {}, 240h, &replica).ok());
  X509Ptr ca = ParseCertificate(short_ca.certificate_pem);
  X509Ptr cert = ParseCertificate(replica.certificate_pem);
  ASSERT_TRUE(ca && cert);
  EXPECT_EQ(ASN1_TIME_compare(X509_get0_notAfter(cert.get()), X509_get0_notAfter(ca.get())), 0);
  EXPECT_EQ(Verify(short_ca.certificate_pem, replica.certificate_pem, X509_PURPOSE_SSL_SERVER), "");
}

TEST_F(CertificateAuthorityTest, PrivateKeyIsPkcs8AndMatchesTheCertificate) {
  EXPECT_THAT(replica_.private_key_pem, StartsWith("-----BEGIN PRIVATE KEY-----\n"));
  EXPECT_THAT(ca_.private_key_pem, StartsWith("-----BEGIN PRIVATE KEY-----\n"));
  X509Ptr cert = ParseCertificate(replica_.certificate_pem);
  KeyPtr key = ParseKey(replica_.private_key_pem);
  KeyPtr ca_key = ParseKey(ca_.private_key_pem);
  ASSERT_TRUE(cert && key && ca_key);
  EXPECT_EQ(X509_check_private_key(cert.get(), key.get()), 1);
  EXPECT_EQ(X509_check_private_key(cert.get(), ca_key.get()), 0);
  ERR_clear_error();
  char group[64] = {};
  ASSERT_EQ(EVP_PKEY_get_group_name(key.get(), group, sizeof(group), nullptr), 1);
  EXPECT_STREQ(group, "prime256v1");
}

TEST_F(CertificateAuthorityTest, CaIsACa) {
  X509Ptr ca = ParseCertificate(ca_.certificate_pem);
  KeyPtr key = ParseKey(ca_.private_key_pem);
  ASSERT_TRUE(ca && key);
  EXPECT_EQ(X509_check_ca(ca.get()), 1);
  EXPECT_TRUE(Critical(ca.get(), NID_basic_constraints));
  EXPECT_EQ(X509_get_pathlen(ca.get()), 0);
  EXPECT_EQ(X509_get_key_usage(ca.get()), static_cast<uint32_t>(KU_KEY_CERT_SIGN | KU_CRL_SIGN));
  EXPECT_TRUE(Critical(ca.get(), NID_key_usage));
  EXPECT_EQ(CommonNameOf(ca.get()), "kubeps team-a/mnist CA");
  EXPECT_EQ(X509_self_signed(ca.get(), 1), 1);
  EXPECT_EQ(X509_check_private_key(ca.get(), key.get()), 1);
  std::vector<std::string> uris;
  ASSERT_TRUE(CertificateUris(ca_.certificate_pem, &uris).ok());
  EXPECT_TRUE(uris.empty());
}

TEST_F(CertificateAuthorityTest, SerialsAreRandom) {
  CertificateAndKey other;
  ASSERT_TRUE(CreateJobCa("team-a", "mnist", 24h, &other).ok());
  X509Ptr a = ParseCertificate(ca_.certificate_pem);
  X509Ptr b = ParseCertificate(other.certificate_pem);
  ASSERT_TRUE(a && b);
  EXPECT_NE(ASN1_INTEGER_cmp(X509_get0_serialNumber(a.get()), X509_get0_serialNumber(b.get())), 0);
  EXPECT_GE(ASN1_STRING_length(X509_get0_serialNumber(a.get())), 8);
}

TEST_F(CertificateAuthorityTest, CertificateUrisReturnsTheUri) {
  std::vector<std::string> uris;
  ASSERT_TRUE(CertificateUris(replica_.certificate_pem, &uris).ok());
  EXPECT_THAT(uris, ElementsAre(ReplicaUri(server0_)));
  // Only the first certificate of a chain counts.
  ASSERT_TRUE(CertificateUris(replica_.certificate_pem + ca_.certificate_pem, &uris).ok());
  EXPECT_THAT(uris, ElementsAre(ReplicaUri(server0_)));
}

TEST_F(CertificateAuthorityTest, GarbagePemIsAnErrorNamingTheProblem) {
  std::vector<std::string> uris;
  Status s = CertificateUris("not a certificate", &uris);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("does not parse as a PEM certificate"));
  EXPECT_THAT(s.message(), HasSubstr("no start line"));
}

TEST_F(CertificateAuthorityTest, BadCaIsAnInvalidArgumentNamingIt) {
  CertificateAndKey out;
  CertificateAndKey garbage{"garbage", ca_.private_key_pem};
  Status s = IssueReplicaCertificate(garbage, server0_, {}, 1h, &out);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("the CA's certificate"));

  CertificateAndKey bad_key{ca_.certificate_pem, "garbage"};
  s = IssueReplicaCertificate(bad_key, server0_, {}, 1h, &out);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("the CA's private key"));

  CertificateAndKey other;
  ASSERT_TRUE(CreateJobCa("team-a", "resnet", 24h, &other).ok());
  CertificateAndKey mismatched{ca_.certificate_pem, other.private_key_pem};
  s = IssueReplicaCertificate(mismatched, server0_, {}, 1h, &out);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("is not its certificate's"));

  // A replica's certificate cannot stand in for the CA.
  s = IssueReplicaCertificate(replica_, server0_, {}, 1h, &out);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("not a CA's"));
}

TEST_F(CertificateAuthorityTest, BadIdentityIsAnInvalidArgument) {
  CertificateAndKey out;
  EXPECT_EQ(CreateJobCa("team-a", "", 24h, &out).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(CreateJobCa("team/a", "mnist", 24h, &out).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(CreateJobCa("team-a", "mnist", 0s, &out).code(), Status::Code::kInvalidArgument);
  ReplicaIdentity bad = server0_;
  bad.index = -1;
  EXPECT_EQ(IssueReplicaCertificate(ca_, bad, {}, 1h, &out).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(IssueReplicaCertificate(ca_, server0_, {"a,b"}, 1h, &out).code(),
            Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace kubeps
