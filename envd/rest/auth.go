//go:build linux

package rest

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"time"
)

// Operations named in a signature.
const (
	OperationRead  = "read"  // GET /files
	OperationWrite = "write" // POST /files
)

// AccessTokenHeader carries envd's access token.
const AccessTokenHeader = "X-Access-Token"

// UnauthorizedMessage is envd's text for a missing or wrong access token.
const UnauthorizedMessage = "unauthorized access, please provide a valid access token or method signing if supported"

// TokenOK reports whether r carries token in AccessTokenHeader, comparing in
// constant time. An empty token matches nothing.
func TokenOK(r *http.Request, token string) bool {
	return token != "" && equal(r.Header.Get(AccessTokenHeader), token)
}

// Signature returns the value of the `signature` query parameter that lets a
// request without the access token read or write path, as E2B's SDKs compute
// it: "v1_" + unpadded standard base64 of sha256 over
// "<path>:<operation>:<username>:<token>" plus ":<expires>" when expires
// (unix seconds) is non-zero. path and username are the query values as sent.
func Signature(path, operation, username, accessToken string, expires int64) string {
	exp := ""
	if expires != 0 {
		exp = strconv.FormatInt(expires, 10)
	}
	return signature(path, operation, username, accessToken, exp)
}

func signature(path, operation, username, token, expires string) string {
	raw := path + ":" + operation + ":" + username + ":" + token
	if expires != "" {
		raw += ":" + expires
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// authorize checks a /files request when an access token is configured: the
// X-Access-Token header, else the signature query parameters. It returns nil
// when the request may proceed.
func (s *server) authorize(r *http.Request, operation string) error {
	if s.token == "" {
		return nil
	}
	if TokenOK(r, s.token) {
		return nil
	}
	q := r.URL.Query()
	sig := q.Get("signature")
	if sig == "" {
		if r.Header.Get(AccessTokenHeader) != "" {
			return errorf(http.StatusUnauthorized, "%s", UnauthorizedMessage)
		}
		return errorf(http.StatusUnauthorized, "missing signature query parameter")
	}
	expires := q.Get("signature_expiration")
	var deadline int64
	if expires != "" {
		n, err := strconv.ParseInt(expires, 10, 64)
		if err != nil {
			return errorf(http.StatusBadRequest, "invalid signature_expiration %s: want unix seconds", quoteShort(expires))
		}
		deadline = n
		// Hash the canonical number, as the SDKs format it.
		expires = strconv.FormatInt(n, 10)
	}
	if !equal(sig, signature(q.Get("path"), operation, q.Get("username"), s.token, expires)) {
		return errorf(http.StatusUnauthorized, "invalid signature")
	}
	if expires != "" && deadline < time.Now().Unix() {
		return errorf(http.StatusUnauthorized, "signature is already expired")
	}
	return nil
}

// equal compares secrets in constant time.
func equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
