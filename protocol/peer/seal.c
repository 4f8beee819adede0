/*
 * seal.c - sealed frames (lattice/seal.h, docs/protocol.md section 3.3):
 * HKDF-SHA256 session keys, AES-256-GCM frames whose nonce is a counter.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include <lattice/seal.h>

#define IV_BYTES 12

_Static_assert(sizeof(struct lat_hdr) == 16, "a sealed frame is at least a header");

void lat_seal_wipe(void *p, size_t n)
{
    OPENSSL_cleanse(p, n);
}

/* One direction's key: HKDF(ikm = block key, salt = sn || cn, info). */
static int hkdf(const uint8_t key[LAT_KEY_BYTES], const uint8_t salt[2 * LAT_NONCE_BYTES],
                const uint8_t *info, size_t infolen, uint8_t out[LAT_SEAL_KEY_BYTES])
{
    EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    EVP_KDF_CTX *kc = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
    OSSL_PARAM p[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)key, LAT_KEY_BYTES),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *)salt, 2 * LAT_NONCE_BYTES),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, (void *)info, infolen),
        OSSL_PARAM_construct_end(),
    };
    int rc = kc && EVP_KDF_derive(kc, out, LAT_SEAL_KEY_BYTES, p) == 1 ? 0 : -1;

    EVP_KDF_CTX_free(kc);
    EVP_KDF_free(kdf);
    return rc;
}

int lat_seal_derive(const uint8_t key[LAT_KEY_BYTES], const uint8_t sn[LAT_NONCE_BYTES],
                    const uint8_t cn[LAT_NONCE_BYTES], uint32_t role, uint32_t node, uint64_t job,
                    bool server, struct lat_seal_keys *out)
{
    uint8_t salt[2 * LAT_NONCE_BYTES], info[sizeof(LAT_SEAL_LABEL) - 1 + 4 + 4 + 8 + 1];
    size_t ll = sizeof(LAT_SEAL_LABEL) - 1;
    uint8_t up[LAT_SEAL_KEY_BYTES], down[LAT_SEAL_KEY_BYTES];
    int rc;

    memcpy(salt, sn, LAT_NONCE_BYTES);
    memcpy(salt + LAT_NONCE_BYTES, cn, LAT_NONCE_BYTES);
    /* integers as on the wire: little-endian (every host here is) */
    memcpy(info, LAT_SEAL_LABEL, ll);
    memcpy(info + ll, &role, 4);
    memcpy(info + ll + 4, &node, 4);
    memcpy(info + ll + 8, &job, 8);
    info[ll + 16] = LAT_SEAL_UP;
    rc = hkdf(key, salt, info, sizeof(info), up);
    info[ll + 16] = LAT_SEAL_DOWN;
    if (rc == 0)
        rc = hkdf(key, salt, info, sizeof(info), down);
    if (rc == 0) {
        memcpy(out->tx, server ? down : up, LAT_SEAL_KEY_BYTES);
        memcpy(out->rx, server ? up : down, LAT_SEAL_KEY_BYTES);
        out->tx_n = out->rx_n = 0;
    }
    lat_seal_wipe(up, sizeof(up));
    lat_seal_wipe(down, sizeof(down));
    return rc;
}

static EVP_CIPHER_CTX *keyed(const uint8_t key[LAT_SEAL_KEY_BYTES], int enc)
{
    EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();

    if (x && EVP_CipherInit_ex(x, EVP_aes_256_gcm(), NULL, key, NULL, enc) == 1)
        return x;
    EVP_CIPHER_CTX_free(x);
    return NULL;
}

int lat_seal_init(struct lat_seal *s, const struct lat_seal_keys *k)
{
    memset(s, 0, sizeof(*s));
    s->k = *k;
    s->tx = keyed(k->tx, 1);
    s->rx = keyed(k->rx, 0);
    if (!s->tx || !s->rx) {
        lat_seal_free(s);
        return -1;
    }
    return 0;
}

void lat_seal_free(struct lat_seal *s)
{
    EVP_CIPHER_CTX_free(s->tx);         /* it wipes its key schedule */
    EVP_CIPHER_CTX_free(s->rx);
    lat_seal_wipe(s, sizeof(*s));
}

/* The frame's nonce from its number, and the length as AAD. */
static int frame_start(EVP_CIPHER_CTX *x, uint64_t n, const uint8_t lenbuf[LAT_SEAL_LEN_BYTES], int enc)
{
    uint8_t iv[IV_BYTES] = { 0 };
    int outl;

    memcpy(iv + 4, &n, 8);
    if (EVP_CipherInit_ex(x, NULL, NULL, NULL, iv, enc) != 1 ||
        EVP_CipherUpdate(x, NULL, &outl, lenbuf, LAT_SEAL_LEN_BYTES) != 1)
        return -1;
    return 0;
}

int lat_seal_begin(struct lat_seal *s, uint32_t len, uint8_t lenbuf[LAT_SEAL_LEN_BYTES])
{
    if (len < sizeof(struct lat_hdr) || len > LAT_SEAL_MAX) {
        errno = EMSGSIZE;
        return -1;
    }
    memcpy(lenbuf, &len, LAT_SEAL_LEN_BYTES);
    return frame_start(s->tx, s->k.tx_n, lenbuf, 1);
}

int lat_seal_update(struct lat_seal *s, const void *in, size_t n, void *out)
{
    int outl;

    return n == 0 || EVP_EncryptUpdate(s->tx, out, &outl, in, (int)n) == 1 ? 0 : -1;
}

int lat_seal_end(struct lat_seal *s, uint8_t tag[LAT_SEAL_TAG_BYTES])
{
    uint8_t none[16];
    int outl;

    if (EVP_EncryptFinal_ex(s->tx, none, &outl) != 1 ||
        EVP_CIPHER_CTX_ctrl(s->tx, EVP_CTRL_GCM_GET_TAG, LAT_SEAL_TAG_BYTES, tag) != 1)
        return -1;
    s->k.tx_n++;
    return 0;
}

int lat_open_begin(struct lat_seal *s, const uint8_t lenbuf[LAT_SEAL_LEN_BYTES], uint32_t *len)
{
    memcpy(len, lenbuf, LAT_SEAL_LEN_BYTES);
    if (*len < sizeof(struct lat_hdr) || *len > LAT_SEAL_MAX)
        return -1;
    return frame_start(s->rx, s->k.rx_n, lenbuf, 0);
}

int lat_open_update(struct lat_seal *s, const void *in, size_t n, void *out)
{
    int outl;

    return n == 0 || EVP_DecryptUpdate(s->rx, out, &outl, in, (int)n) == 1 ? 0 : -1;
}

int lat_open_end(struct lat_seal *s, const uint8_t tag[LAT_SEAL_TAG_BYTES])
{
    uint8_t none[16];
    int outl;

    s->k.rx_n++;                        /* a failure ends the connection anyway */
    if (EVP_CIPHER_CTX_ctrl(s->rx, EVP_CTRL_GCM_SET_TAG, LAT_SEAL_TAG_BYTES, (void *)tag) != 1 ||
        EVP_DecryptFinal_ex(s->rx, none, &outl) != 1)
        return -1;
    return 0;
}

long lat_seal_frame(struct lat_seal *s, const struct iovec *iov, int n, uint8_t *out)
{
    size_t len = 0, at = LAT_SEAL_LEN_BYTES;

    for (int i = 0; i < n; i++)
        len += iov[i].iov_len;
    if (len > LAT_SEAL_MAX || lat_seal_begin(s, (uint32_t)len, out) < 0)
        return -1;
    for (int i = 0; i < n; i++) {
        if (lat_seal_update(s, iov[i].iov_base, iov[i].iov_len, out + at) < 0)
            return -1;
        at += iov[i].iov_len;
    }
    if (lat_seal_end(s, out + at) < 0)
        return -1;
    return (long)(at + LAT_SEAL_TAG_BYTES);
}

bool lat_seal_wanted(int fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);

    return getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
           (ss.ss_family == AF_INET || ss.ss_family == AF_INET6);
}
