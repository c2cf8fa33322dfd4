package mysql

import (
	"context"
	"fmt"
)

// qMaxPacket reads the server's bound on one packet, and so on one
// statement: a push is one INSERT carrying the payload.
const qMaxPacket = `SELECT @@max_allowed_packet`

// payloadHeadroom is what a push's INSERT adds around its payload. The
// driver escapes the payload into the statement text (interpolateParams),
// and escaping doubles a byte at worst (quote, backslash, NUL, newline,
// carriage return, 0x1a), so a payload of n bytes may take 2n plus the rest
// of the statement. Measured on MariaDB 10.11 with max_allowed_packet
// 16 MiB, a 63-byte queue name and a 255-byte key of quotes: the largest
// all-quote payload stored and claimed back was 8388162 bytes, so the rest
// of the statement took 16777216 - 2*8388162 = 892 bytes. 4 KiB leaves room
// for changes to the statement. A claim reads the payload back unescaped,
// well within the packet.
const payloadHeadroom = 4 << 10

// MaxPayload is the largest payload a push can store whatever its bytes:
// half of the smaller of the server's max_allowed_packet and the driver's
// own limit, less payloadHeadroom.
func (s *Store) MaxPayload(ctx context.Context) (int64, error) {
	var packet int64
	if err := s.on(nil).QueryRow(ctx, qMaxPacket).Scan(&packet); err != nil {
		return 0, fmt.Errorf("mysql %q: read max_allowed_packet: %w", s.name, err)
	}
	if s.clientPacket > 0 && s.clientPacket < packet {
		packet = s.clientPacket
	}
	return max(0, (packet-payloadHeadroom)/2), nil
}
