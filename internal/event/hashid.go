package event

import "encoding/hex"

// HashID formats the first 128 bits of sum, a hash of at least 16 bytes
// (SHA-256), as an RFC 9562 version 8 (custom) UUID: the form of the ids
// derived from what identifies a message rather than drawn at random (ban
// ids, the event ids of access-log lines), so that the same message always
// gets the same id and consumers deduplicate it.
func HashID(sum []byte) string {
	var u [16]byte
	copy(u[:], sum)
	u[6] = u[6]&0x0f | 0x80 // version 8
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	var out [36]byte
	hex.Encode(out[0:8], u[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], u[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], u[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], u[8:10])
	out[23] = '-'
	hex.Encode(out[24:36], u[10:16])
	return string(out[:])
}
