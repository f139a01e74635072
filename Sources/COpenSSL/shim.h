// OpenSSL 3 for rpcd's TLS: the headers, plus functions for what OpenSSL defines as macros
// (Swift imports functions, not function-like macros).
#ifndef RPCD_COPENSSL_SHIM_H
#define RPCD_COPENSSL_SHIM_H

#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/crypto.h>

static inline int crpc_ssl_ctx_set_min_tls12(SSL_CTX *ctx) {
    return (int)SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
}

static inline long crpc_ssl_ctx_set_default_modes(SSL_CTX *ctx) {
    // Partial writes and a moving write buffer: the plaintext comes from a buffer that may grow
    // between retries. Release idle buffers: an idle connection keeps no 34 KiB record buffers.
    return SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER
                                 | SSL_MODE_RELEASE_BUFFERS);
}

static inline uint64_t crpc_ssl_ctx_set_default_options(SSL_CTX *ctx) {
    // No renegotiation; an EOF without close_notify ends the stream like a TCP FIN (lines are
    // whole units, and a cut line is dropped by the framer anyway).
    return SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
}

static inline int crpc_ssl_set_sni(SSL *ssl, const char *name) {
    return (int)SSL_set_tlsext_host_name(ssl, name);
}

static inline size_t crpc_bio_pending(BIO *bio) {
    return BIO_ctrl_pending(bio);
}

#endif
