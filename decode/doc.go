// Package decode holds the decode-pool plugins. The decode-filter itself is
// in package profiles (a role filter); this package adds the
// active-request-scorer, which scores decode endpoints by the requests the
// picker itself has in flight on them.
package decode
