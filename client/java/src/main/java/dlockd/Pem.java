package dlockd;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.SecureRandom;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.List;
import javax.net.ssl.KeyManager;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLSocketFactory;
import javax.net.ssl.TrustManager;
import javax.net.ssl.TrustManagerFactory;

/**
 * TLS from PEM files, with the standard library only: a CA bundle for the server's certificate, and a client
 * certificate chain with its private key ({@code PRIVATE KEY} PKCS#8, {@code RSA PRIVATE KEY} PKCS#1 or
 * {@code EC PRIVATE KEY} SEC1; not encrypted).
 */
public final class Pem {
    private Pem() {}

    /**
     * An SSL context from PEM files (TLS 1.2 or 1.3).
     *
     * @param caFile the CA certificates to trust, or null for the JVM's default trust store
     * @param certFile the client's certificate chain, or null for none
     * @param keyFile the client's private key (with certFile), or null
     * @return the context
     * @throws IllegalArgumentException when a file cannot be read or parsed
     */
    public static SSLContext context(String caFile, String certFile, String keyFile) {
        if ((certFile == null) != (keyFile == null)) {
            throw new IllegalArgumentException("DLOCK_TLS_CERT and DLOCK_TLS_KEY (a certificate and its key) go together");
        }
        try {
            TrustManager[] tms = null;
            if (caFile != null) {
                List<Certificate> cas = certs(caFile);
                KeyStore ks = KeyStore.getInstance(KeyStore.getDefaultType());
                ks.load(null, null);
                for (int i = 0; i < cas.size(); i++) ks.setCertificateEntry("ca" + i, cas.get(i));
                TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
                tmf.init(ks);
                tms = tmf.getTrustManagers();
            }
            KeyManager[] kms = null;
            if (certFile != null) {
                List<Certificate> chain = certs(certFile);
                PrivateKey key = privateKey(keyFile);
                KeyStore ks = KeyStore.getInstance(KeyStore.getDefaultType());
                ks.load(null, null);
                char[] pw = new char[0];
                ks.setKeyEntry("client", key, pw, chain.toArray(new Certificate[0]));
                KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
                kmf.init(ks, pw);
                kms = kmf.getKeyManagers();
            }
            SSLContext ctx = SSLContext.getInstance("TLS");
            ctx.init(kms, tms, new SecureRandom());
            return ctx;
        } catch (IOException | GeneralSecurityException e) {
            throw new IllegalArgumentException("TLS files: " + e.getMessage(), e);
        }
    }

    /**
     * @param caFile see {@link #context}
     * @param certFile see {@link #context}
     * @param keyFile see {@link #context}
     * @return the socket factory of {@link #context}
     */
    public static SSLSocketFactory socketFactory(String caFile, String certFile, String keyFile) {
        return context(caFile, certFile, keyFile).getSocketFactory();
    }

    static List<Certificate> certs(String file) throws IOException, GeneralSecurityException {
        byte[] b = Files.readAllBytes(Path.of(file));
        Collection<? extends Certificate> cs = CertificateFactory.getInstance("X.509").generateCertificates(new ByteArrayInputStream(b));
        if (cs.isEmpty()) throw new IllegalArgumentException(file + ": no certificate");
        return new ArrayList<>(cs);
    }

    static PrivateKey privateKey(String file) throws IOException, GeneralSecurityException {
        String s = new String(Files.readAllBytes(Path.of(file)), StandardCharsets.US_ASCII);
        for (String type : new String[] {"PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"}) {
            String begin = "-----BEGIN " + type + "-----", end = "-----END " + type + "-----";
            int i = s.indexOf(begin);
            if (i < 0) continue;
            int j = s.indexOf(end, i);
            if (j < 0) break;
            byte[] der = Base64.getMimeDecoder().decode(s.substring(i + begin.length(), j));
            switch (type) {
                case "RSA PRIVATE KEY":
                    return KeyFactory.getInstance("RSA").generatePrivate(new PKCS8EncodedKeySpec(pkcs8(RSA_ALG, der)));
                case "EC PRIVATE KEY":
                    return KeyFactory.getInstance("EC").generatePrivate(new PKCS8EncodedKeySpec(pkcs8(ecAlg(der), der)));
                default:
                    for (String alg : new String[] {"RSA", "EC", "Ed25519", "Ed448"}) {
                        try {
                            return KeyFactory.getInstance(alg).generatePrivate(new PKCS8EncodedKeySpec(der));
                        } catch (GeneralSecurityException ignored) {
                            // the next algorithm
                        }
                    }
                    throw new IllegalArgumentException(file + ": a PKCS#8 key of no known algorithm (RSA, EC, Ed25519)");
            }
        }
        throw new IllegalArgumentException(file + ": no unencrypted PEM private key (PRIVATE KEY, RSA PRIVATE KEY, EC PRIVATE KEY)");
    }

    // AlgorithmIdentifier of rsaEncryption: SEQUENCE { OID 1.2.840.113549.1.1.1, NULL }
    private static final byte[] RSA_ALG = der(0x30, cat(new byte[] {0x06, 0x09, 0x2a, (byte) 0x86, 0x48, (byte) 0x86, (byte) 0xf7, 0x0d, 0x01, 0x01, 0x01}, new byte[] {0x05, 0x00}));

    /** AlgorithmIdentifier of an EC key: id-ecPublicKey and the curve named in the SEC1 key's [0] parameters. */
    private static byte[] ecAlg(byte[] sec1) {
        byte[] ecOid = {0x06, 0x07, 0x2a, (byte) 0x86, 0x48, (byte) 0xce, 0x3d, 0x02, 0x01};
        int[] p = {0};
        int[] seq = tlv(sec1, p);
        if (seq[0] != 0x30) throw new IllegalArgumentException("EC PRIVATE KEY: not a SEQUENCE");
        int at = seq[1], end = seq[1] + seq[2];
        while (at < end) {
            p[0] = at;
            int[] e = tlv(sec1, p);
            if (e[0] == 0xa0) {
                byte[] oid = new byte[e[2]];
                System.arraycopy(sec1, e[1], oid, 0, e[2]);
                return der(0x30, cat(ecOid, oid));
            }
            at = e[1] + e[2];
        }
        throw new IllegalArgumentException("EC PRIVATE KEY without its curve: use PKCS#8 (openssl pkcs8 -topk8 -nocrypt)");
    }

    /** Reads a DER tag and length at p[0]: {tag, content start, content length}. */
    private static int[] tlv(byte[] b, int[] p) {
        int i = p[0];
        if (i + 2 > b.length) throw new IllegalArgumentException("bad DER");
        int tag = b[i++] & 0xff;
        int len = b[i++] & 0xff;
        if (len >= 0x80) {
            int n = len & 0x7f;
            if (n < 1 || n > 3 || i + n > b.length) throw new IllegalArgumentException("bad DER length");
            len = 0;
            for (int k = 0; k < n; k++) len = (len << 8) | (b[i++] & 0xff);
        }
        if (i + len > b.length) throw new IllegalArgumentException("bad DER length");
        return new int[] {tag, i, len};
    }

    private static byte[] pkcs8(byte[] alg, byte[] key) {
        return der(0x30, cat(new byte[] {0x02, 0x01, 0x00}, alg, der(0x04, key)));
    }

    private static byte[] der(int tag, byte[] content) {
        ByteArrayOutputStream o = new ByteArrayOutputStream();
        o.write(tag);
        int n = content.length;
        if (n < 0x80) {
            o.write(n);
        } else if (n < 0x100) {
            o.write(0x81);
            o.write(n);
        } else if (n < 0x10000) {
            o.write(0x82);
            o.write(n >> 8);
            o.write(n);
        } else {
            o.write(0x83);
            o.write(n >> 16);
            o.write(n >> 8);
            o.write(n);
        }
        o.write(content, 0, n);
        return o.toByteArray();
    }

    private static byte[] cat(byte[]... parts) {
        ByteArrayOutputStream o = new ByteArrayOutputStream();
        for (byte[] x : parts) o.write(x, 0, x.length);
        return o.toByteArray();
    }
}
