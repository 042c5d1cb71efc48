package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// Defaults of Generate, as Nomad's `tls ca create` and `tls cert create`.
const (
	DefaultCADays   = 5 * 365
	DefaultCertDays = 365
)

// CAOptions describe a CA to make.
type CAOptions struct {
	// CommonName is the CA's name; empty is "Berth Agent CA <serial>".
	CommonName string
	// Days it is valid from NotBefore; 0 is DefaultCADays.
	Days int
	// NotBefore is when it starts to be valid; zero is now.
	NotBefore time.Time
}

// CertOptions describe a certificate to make.
type CertOptions struct {
	// Role is server, client or cli; its RoleName is the first DNS SAN and
	// the common name.
	Role Role
	// Region names the role; empty is DefaultRegion.
	Region string
	// DNSNames and IPs are added to the SANs, after the role name,
	// localhost and (but for cli certificates) 127.0.0.1.
	DNSNames []string
	IPs      []net.IP
	// Days it is valid from NotBefore; 0 is DefaultCertDays.
	Days int
	// NotBefore is when it starts to be valid; zero is now.
	NotBefore time.Time
}

// PEM is a certificate and its private key, PEM encoded.
type PEM struct {
	Cert []byte
	Key  []byte
}

// NewCA makes a self-signed CA with an ECDSA P-256 key.
func NewCA(opts CAOptions) (PEM, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return PEM{}, err
	}
	serial, err := serialNumber()
	if err != nil {
		return PEM{}, err
	}
	cn := opts.CommonName
	if cn == "" {
		cn = "Berth Agent CA " + serial.String()
	}
	start, end := validity(opts.NotBefore, opts.Days, DefaultCADays)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"berth"}},
		NotBefore:             start,
		NotAfter:              end,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return PEM{}, err
	}
	return encode(der, key)
}

// NewCert makes a certificate for opts.Role signed by ca, with an ECDSA
// P-256 key. Server and client certificates serve and dial (server and
// client auth); cli certificates only dial.
func NewCert(ca PEM, opts CertOptions) (PEM, error) {
	caCert, caKey, err := ParseCA(ca)
	if err != nil {
		return PEM{}, err
	}
	var usages []x509.ExtKeyUsage
	switch opts.Role {
	case RoleServer, RoleClient:
		usages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	case RoleCLI:
		usages = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	default:
		return PEM{}, fmt.Errorf("tls: unknown role %q (want server, client or cli)", opts.Role)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return PEM{}, err
	}
	serial, err := serialNumber()
	if err != nil {
		return PEM{}, err
	}
	name := RoleName(opts.Role, opts.Region)
	dns := []string{name, "localhost"}
	for _, d := range opts.DNSNames {
		if !slices.Contains(dns, d) {
			dns = append(dns, d)
		}
	}
	var ips []net.IP
	if opts.Role != RoleCLI {
		ips = append(ips, net.IPv4(127, 0, 0, 1))
	}
	for _, ip := range opts.IPs {
		if !slices.ContainsFunc(ips, ip.Equal) {
			ips = append(ips, ip)
		}
	}
	start, end := validity(opts.NotBefore, opts.Days, DefaultCertDays)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             start,
		NotAfter:              end,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           usages,
		BasicConstraintsValid: true,
		DNSNames:              dns,
		IPAddresses:           ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return PEM{}, err
	}
	return encode(der, key)
}

// ParseCA reads a CA certificate and its key.
func ParseCA(ca PEM) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(ca.Cert)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, errors.New("tls: CA certificate: no PEM certificate")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, nil, errors.New("tls: CA certificate: not a CA")
	}
	kb, _ := pem.Decode(ca.Key)
	if kb == nil {
		return nil, nil, errors.New("tls: CA key: no PEM key")
	}
	var key *ecdsa.PrivateKey
	switch kb.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(kb.Bytes)
	case "PRIVATE KEY":
		var k any
		k, err = x509.ParsePKCS8PrivateKey(kb.Bytes)
		if err == nil {
			var ok bool
			if key, ok = k.(*ecdsa.PrivateKey); !ok {
				err = errors.New("not an ECDSA key")
			}
		}
	default:
		err = fmt.Errorf("PEM block %q is not an ECDSA key", kb.Type)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("tls: CA key: %w", err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, nil, errors.New("tls: CA key does not match the CA certificate")
	}
	return cert, key, nil
}

func validity(notBefore time.Time, days, def int) (time.Time, time.Time) {
	if notBefore.IsZero() {
		// A minute back: a peer whose clock is a little behind accepts it.
		notBefore = time.Now().Add(-time.Minute)
	}
	if days <= 0 {
		days = def
	}
	return notBefore, notBefore.Add(time.Duration(days) * 24 * time.Hour)
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}

func encode(der []byte, key *ecdsa.PrivateKey) (PEM, error) {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return PEM{}, err
	}
	return PEM{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
	}, nil
}
