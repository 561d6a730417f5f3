// Package imagesize reads the pixel size of PNG, JPEG, GIF and WebP images
// from their headers only, without decoding the image. It reads `data:` URLs
// through an incremental base64 decoder, so a multi-megabyte image costs the
// few hundred bytes of its header, never the whole payload.
//
// Every read is bounded ([Limits]); malformed base64, unknown formats,
// truncated or corrupt headers and absurd sizes are reported as *Error
// values whose Kind tells them apart and whose message says precisely what
// was wrong and where.
package imagesize
