package mysqldsn

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	cases := []struct {
		in      string
		pool    Pool
		params  map[string]string
		wantErr string
	}{
		{in: "u:p@tcp(db:3306)/coordd", pool: DefaultPool},
		{
			in:     "u:p@tcp(db:3306)/coordd?maxOpenConns=4&readTimeout=5s&maxIdleConns=0&connMaxLifetime=90s&connMaxIdleTime=0&sql_mode=ANSI",
			pool:   Pool{MaxOpenConns: 4, MaxIdleConns: 0, ConnMaxLifetime: 90 * time.Second},
			params: map[string]string{"sql_mode": "ANSI"},
		},
		{in: "u@tcp(db)/x?maxOpenConns=0", wantErr: "maxOpenConns"},
		// Networks: user:password without its "@" would be dialed as one.
		{in: "u:p@unix(/run/mysqld/mysqld.sock)/coordd", pool: DefaultPool},
		{in: "u:p@tcp6([::1]:3306)/coordd", pool: DefaultPool},
		{in: "u:p@/coordd", pool: DefaultPool},
		{in: "secaudit:PlainSecret123tcp(db:3306)/coordd", wantErr: `is the "@" after the password missing?`},
		{in: "secaudit:PlainSecret123/coordd", wantErr: `is the "@" after the password missing?`},
		{in: "u:p@udp(db:3306)/coordd", wantErr: "must be tcp, tcp4, tcp6 or unix"},
		{in: "u@tcp(db)/x?maxIdleConns=-1", wantErr: "maxIdleConns"},
		{in: "u@tcp(db)/x?connMaxLifetime=5", wantErr: "connMaxLifetime"},
		{in: "u@tcp(db)/x?connMaxIdleTime=-1s", wantErr: "connMaxIdleTime"},
		{in: "u@tcp(db)/x?readTimeout=banana", wantErr: "invalid duration"},
		// Charsets: only those under which client-side escaping is safe.
		{in: "u@tcp(db)/x?charset=utf8mb4,utf8&collation=utf8mb4_bin", pool: DefaultPool},
		{in: "u@tcp(db)/x?charset=latin1&collation=latin1_swedish_ci", pool: DefaultPool},
		{in: "u@tcp(db)/x?charset=ascii", pool: DefaultPool},
		{in: "u@tcp(db)/x?charset=binary&collation=binary", pool: DefaultPool},
		{in: "u@tcp(db)/x?collation=utf8mb4_0900_ai_ci", pool: DefaultPool},
		{in: "u@tcp(db)/x?charset=gbk", wantErr: `charset "gbk"`},
		{in: "u@tcp(db)/x?charset=utf8mb4,big5", wantErr: `charset "big5"`},
		{in: "u@tcp(db)/x?charset=SJIS", wantErr: `charset "SJIS"`},
		{in: "u@tcp(db)/x?charset=cp932&charset=utf8mb4", wantErr: `charset "cp932"`},
		{in: "u@tcp(db)/x?charset=gb2312", wantErr: `charset "gb2312"`},
		{in: "u@tcp(db)/x?charset=utf8mb4%2Cgbk", wantErr: `charset "utf8mb4%2Cgbk"`},
		{in: "u@tcp(db)/x?charset=utf8mb4 COLLATE gbk_bin", wantErr: "charset"},
		{in: "u@tcp(db)/x?collation=gbk_chinese_ci", wantErr: `collation "gbk_chinese_ci"`},
		{in: "u@tcp(db)/x?collation=gb18030_bin", wantErr: `collation "gb18030_bin"`},
		{in: "u@tcp(db)/x?collation=binary_x", wantErr: `collation "binary_x"`},
		{in: "u@tcp(db)/x?collation=utf8mb4_bin;SET", wantErr: "collation"},
		// Session variables: the driver sends SET k = v.
		{in: "u@tcp(db)/x?character_set_client=gbk", wantErr: "character_set_client"},
		{in: "u@tcp(db)/x?CHARACTER_SET_CONNECTION=gbk", wantErr: "CHARACTER_SET_CONNECTION"},
		{in: "u@tcp(db)/x?character_set_results=big5", wantErr: "character_set_results"},
		{in: "u@tcp(db)/x?collation_connection=gbk_bin", wantErr: "collation_connection"},
		{in: "u@tcp(db)/x?names=gbk", wantErr: "names"},
		{in: "u@tcp(db)/x?@@character_set_client=gbk", wantErr: "plain name"},
		{in: "u@tcp(db)/x?sql_mode='',character_set_client=gbk", wantErr: "plain name"},
		{in: "u@tcp(db)/x?sql_mode=%27%27%2Ccharacter_set_client%3Dgbk", wantErr: "plain name"},
		{in: "u@tcp(db)/x?sql_mode='a\\',character_set_client=gbk -- '", wantErr: "plain name"},
		{in: "u@tcp(db)/x?sql_mode=_gbk'x'", wantErr: "plain name"},
		{
			in:     "u@tcp(db)/x?sql_mode=%27STRICT_ALL_TABLES%2CANSI_QUOTES%27&time_zone=%27%2B01%3A00%27&autocommit=1&transaction_isolation=READ-COMMITTED",
			pool:   DefaultPool,
			params: map[string]string{"sql_mode": "'STRICT_ALL_TABLES,ANSI_QUOTES'", "time_zone": "'+01:00'", "autocommit": "1", "transaction_isolation": "READ-COMMITTED"},
		},
		// The driver's own parameters, checked by its rules.
		{in: "u@tcp(db)/x?tls=true&parseTime=1&loc=UTC&timeout=5s&maxAllowedPacket=0", pool: DefaultPool},
		{in: "u@tcp(db)/x?tls=skip-verify", pool: DefaultPool},
		{in: "u@tcp(db)/x?tls=Preferred", pool: DefaultPool},
		{in: "u@tcp(db)/x?tls=custom", wantErr: "unknown config name: custom"},
		{in: "u@tcp(db)/x?parseTime=yes", wantErr: "invalid bool value: yes"},
		{in: "u@tcp(db)/x?loc=Nowhere%2FCity", wantErr: "unknown time zone Nowhere/City"},
		{in: "u@tcp(db)/x?maxAllowedPacket=big", wantErr: `parsing "big": invalid syntax`},
		{in: "u@tcp(db)/x?serverPubKey=k", wantErr: "unknown server pub key name: k"},
		{in: "u@tcp(db)/x?strict=true", wantErr: "no strict mode"},
		{in: "u@tcp4/x", wantErr: "default addr for network 'tcp4' unknown"},
		{in: "u@tcp(db:3306/x", wantErr: "network address not terminated"},
		{in: "u@tcp(db:3306)", wantErr: "missing the slash"},
		{in: "u@tcp(db)/x%zz", wantErr: `invalid dbname "x%zz"`},
		// The parameters start where the driver says: after the last '/',
		// so a '?' in the password hides nothing.
		{in: "u:p?charset=utf8mb4@tcp(db)/x?charset=gbk", wantErr: `charset "gbk"`},
		{in: "u:p?x@tcp(db)/x?maxOpenConns=3", pool: Pool{MaxOpenConns: 3, MaxIdleConns: 16, ConnMaxLifetime: 5 * time.Minute, ConnMaxIdleTime: time.Minute}},
	}
	for _, c := range cases {
		driverDSN, pool, err := Parse(c.in)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("Parse(%q) error = %v, want one naming %q", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", c.in, err)
			continue
		}
		if pool != c.pool {
			t.Errorf("Parse(%q) pool = %+v, want %+v", c.in, pool, c.pool)
		}
		cfg, err := parseDriverDSN(driverDSN)
		if err != nil {
			t.Errorf("Parse(%q) gives the driver %q, which does not parse: %v", c.in, driverDSN, err)
			continue
		}
		for k := range cfg.params {
			if _, ok := c.params[k]; !ok {
				t.Errorf("Parse(%q): parameter %q reached the driver", c.in, k)
			}
		}
		for k, v := range c.params {
			if cfg.params[k] != v {
				t.Errorf("Parse(%q): param %s = %q, want %q", c.in, k, cfg.params[k], v)
			}
		}
	}
}
