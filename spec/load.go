package spec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// LoadOptions tune Load and LoadFiles.
type LoadOptions struct {
	// SkipEnv (validate --skip-env) leaves ${VAR} references unexpanded and
	// does not fail on unset variables; their syntax is still checked, and
	// checks that need the expanded value (DSN and URL parsing) are skipped
	// for fields that hold a reference.
	SkipEnv bool
	// Getenv looks variables up; nil means os.LookupEnv.
	Getenv func(string) (string, bool)
	// DataDir holds the implicit embedded store and default sqlite files;
	// "" means DefaultDataDir().
	DataDir string
	// ReadTimeout bounds the reading of the spec's files (and of the
	// secret files it names) as a whole; 0 means DefaultReadTimeout.
	ReadTimeout time.Duration
	// ReadFile reads the secret files that ${file:...} and
	// ${credential:...} name, by absolute path; nil means the spec
	// reader's bounded read (a regular file of at most MaxSecretFileSize,
	// within the read timeout).
	ReadFile func(path string) ([]byte, error)
}

// Limits on what Load reads. A spec comes from the operators, but a
// stray FIFO, a symlink to a device or a generated file gone wrong must
// not hang or exhaust coordd. Real specs stay far below them:
// 10,000 objects (reconcile's BenchmarkReconcile10k) take about 400 KB
// written one object a line and 700 KB in block style.
const (
	// MaxFileSize bounds one spec file: a parse costs about 50 bytes of
	// memory per byte of YAML.
	MaxFileSize = 8 << 20
	// MaxTotalSize bounds all the files of a spec together.
	MaxTotalSize = 16 << 20
	// MaxObjects bounds the semaphores, cron tasks, queues and rate limits of a spec.
	MaxObjects = 50000
	// MaxErrors is how many errors a failed load returns; the rest are
	// counted in a closing "... and N more errors" entry.
	MaxErrors = 50
)

// Load is LoadContext without a context.
func Load(path string, opts LoadOptions) (*Spec, error) {
	return LoadContext(context.Background(), path, opts)
}

// LoadContext reads a spec from a file or from a directory of *.yaml/*.yml
// files (not recursive, hidden files skipped, merged in name order). On
// failure the error is an Errors listing every problem found (at most
// MaxErrors). Only regular files are read, or symlinks to them (see
// readRegular). Reading is bounded in time: a file system call that has
// not returned when opts.ReadTimeout has passed, or when ctx ends (a
// signal), fails the load with an error at that file (ErrReadTimeout, or
// ctx's error), whatever the kernel does with the call.
func LoadContext(ctx context.Context, path string, opts LoadOptions) (*Spec, error) {
	r, cancel := newReader(ctx, opts.ReadTimeout)
	defer cancel()
	fail := func(msg string, err error) (*Spec, error) {
		return nil, Errors{{Pos: Pos{File: path, Line: 1, Col: 1}, Msg: msg + pathErr(err), Err: sentinelOf(err)}}
	}
	fi, err := r.stat(path)
	if err != nil {
		return fail("cannot read spec: ", err)
	}
	if !fi.IsDir() {
		data, err := r.readFile(path, MaxFileSize)
		if err != nil {
			return fail("cannot read spec: ", err)
		}
		return load([]input{{name: path, data: data}}, nil, r, opts)
	}
	entries, err := r.readDir(path)
	if err != nil {
		return fail("cannot read spec directory: ", err)
	}
	var ins []input
	var readErrs Errors
	total := 0
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		full := filepath.Join(path, name)
		st, err := r.stat(full)
		if err == nil && st.IsDir() {
			continue
		}
		limit := min(MaxFileSize, MaxTotalSize-total)
		var data []byte
		if err == nil || !isStop(err) {
			data, err = r.readFile(full, limit)
		}
		if err != nil {
			msg := "cannot read spec: " + pathErr(err)
			if errors.Is(err, ErrTooLarge) && limit < MaxFileSize {
				msg += fmt.Sprintf(" (the files of a spec together hold at most %s)", sizeString(MaxTotalSize))
			}
			readErrs = append(readErrs, &Error{Pos: Pos{File: full, Line: 1, Col: 1}, Msg: msg, Err: sentinelOf(err)})
			if isStop(err) {
				// The deadline passed or the caller gave up: the
				// files after this one are not read.
				return nil, readErrs
			}
			continue
		}
		total += len(data)
		ins = append(ins, input{name: full, data: data})
	}
	if len(ins) == 0 && len(readErrs) == 0 {
		return fail("no *.yaml or *.yml files in directory", nil)
	}
	return load(ins, readErrs, r, opts)
}

// isStop reports whether err ended a load: its deadline passed, or its
// caller's context ended.
func isStop(err error) bool {
	return errors.Is(err, ErrReadTimeout) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// checkSpecFile refuses what readSpecFile must not read.
func checkSpecFile(path string, fi fs.FileInfo, limit int) error {
	if !fi.Mode().IsRegular() {
		return &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w (%s)", ErrNotRegular, fileKind(fi.Mode()))}
	}
	if fi.Size() > int64(limit) {
		return &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: %d bytes, more than %s", ErrTooLarge, fi.Size(), sizeString(limit))}
	}
	return nil
}

// fileKind names the type of a file that is not a regular one.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "irregular file"
}

// sizeString formats a size limit: whole MiB, else bytes.
func sizeString(n int) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// sentinelOf is the sentinel err wraps, or nil.
func sentinelOf(err error) error {
	for _, s := range []error{ErrNotRegular, ErrTooLarge, ErrReadTimeout, context.Canceled, context.DeadlineExceeded, fs.ErrNotExist} {
		if errors.Is(err, s) {
			return s
		}
	}
	return nil
}

// LoadFiles loads a spec from named contents, merged in name order. Names
// appear in error positions, and relative sqlite paths resolve against the
// directory part of the name.
func LoadFiles(files map[string][]byte, opts LoadOptions) (*Spec, error) {
	if len(files) == 0 {
		return nil, Errors{{Pos: Pos{File: "(no files)", Line: 1, Col: 1}, Msg: "no spec files given"}}
	}
	ins := make([]input, 0, len(files))
	for name, data := range files {
		ins = append(ins, input{name: name, data: data})
	}
	r, cancel := newReader(context.Background(), opts.ReadTimeout)
	defer cancel()
	return load(ins, nil, r, opts)
}

// pathErr is err's message without the path, which the error's position
// names already.
func pathErr(err error) string {
	if err == nil {
		return ""
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

type input struct {
	name string
	data []byte
}

// srcFile is one spec file being loaded.
type srcFile struct {
	name string // as given, or dir/name for a directory
	dir  string // absolute directory, for relative sqlite paths
}

// posOf is n's position; a missing node or position is clamped to 1:1 so
// that every error can be jumped to.
func (f *srcFile) posOf(n *yaml.Node) Pos {
	p := Pos{File: f.name, Line: 1, Col: 1}
	if n != nil {
		p.Line = max(n.Line, 1)
		p.Col = max(n.Column, 1)
	}
	return p
}

// pos formats n's position as FILE:LINE:COL for messages.
func (f *srcFile) pos(n *yaml.Node) string {
	return f.posOf(n).String()
}

// decl is one declaration (a named object, a backend or cluster) found in
// a file, waiting to be decoded once all files are read.
type decl struct {
	file *srcFile
	key  *yaml.Node
	val  *yaml.Node
}

// Top-level sections and the prefix their entries use in addresses.
var sections = []string{"backends", "cluster", "semaphores", "cron", "queues", "rate_limits"}

var sectionPrefix = map[string]string{
	"backends":    "backends",
	"semaphores":  string(KindSemaphore),
	"cron":        string(KindCron),
	"queues":      string(KindQueue),
	"rate_limits": string(KindRateLimit),
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

type loader struct {
	read     *reader // for secret files
	readFile func(string) ([]byte, error)
	secrets  map[string]secretResult // secret files read, by path
	skipEnv  bool
	getenv   func(string) (string, bool)
	dataDir  string
	errs     errorList
	// objects counts the semaphores, cron tasks and queues collected, up
	// to MaxObjects; past it the rest are dropped with one error.
	objects int

	named   map[string]map[string]*decl // section -> name -> declaration
	cluster *decl
	// firstBackends is the first top-level "backends" key, where an
	// ambiguous cluster backend is reported when there is no cluster key.
	firstBackends *decl

	// known maps every backend an object may name to its type ("" when the
	// type is invalid, so capability checks are skipped).
	known map[string]string
	// def is the backend of objects that name none; defOK is false when it
	// is unusable (already reported). ambiguous: 2+ backends and no
	// cluster.backend, reported on each object that relies on it.
	def       string
	defOK     bool
	ambiguous bool

	// backendEnv is the set of variables connection fields reference.
	backendEnv map[string]bool
}

// load parses and decodes the inputs; readErrs are the files Load could
// not read, reported with the rest.
func load(ins []input, readErrs Errors, r *reader, opts LoadOptions) (*Spec, error) {
	sort.Slice(ins, func(i, j int) bool { return ins[i].name < ins[j].name })
	l := &loader{
		read:     r,
		readFile: opts.ReadFile,
		skipEnv:  opts.SkipEnv,
		getenv:   opts.Getenv,
		dataDir:  opts.DataDir,
		named:    map[string]map[string]*decl{},
		known:    map[string]string{},
	}
	if l.getenv == nil {
		l.getenv = os.LookupEnv
	}
	if l.dataDir == "" {
		l.dataDir = DefaultDataDir()
	}
	if abs, err := filepath.Abs(l.dataDir); err == nil {
		l.dataDir = abs
	}
	for sec := range sectionPrefix {
		l.named[sec] = map[string]*decl{}
	}
	s := &Spec{
		Backends:   map[string]*Backend{},
		Semaphores: map[string]*Semaphore{},
		Cron:       map[string]*CronTask{},
		Queues:     map[string]*Queue{},
		RateLimits: map[string]*RateLimit{},
	}
	for _, e := range readErrs {
		l.errs.add(e)
	}
	total := 0
	for _, in := range ins {
		f := &srcFile{name: in.name, dir: filepath.Dir(in.name)}
		if abs, err := filepath.Abs(f.dir); err == nil {
			f.dir = abs
		}
		s.Files = append(s.Files, in.name)
		// Load has checked these limits already; LoadFiles relies on them.
		total += len(in.data)
		if len(in.data) > MaxFileSize || total > MaxTotalSize {
			l.errs.add(&Error{Pos: Pos{File: in.name, Line: 1, Col: 1}, Err: ErrTooLarge,
				Msg: fmt.Sprintf("spec too large: a file holds at most %s, and the files of a spec together %s", sizeString(MaxFileSize), sizeString(MaxTotalSize))})
			continue
		}
		root := l.parse(f, in.data)
		if root == nil {
			continue
		}
		l.scanAliases(f, root)
		l.collect(f, root)
	}
	l.decodeBackends(s)
	l.decodeCluster(s)
	l.decodeSemaphores(s)
	l.decodeRateLimits(s) // before the kinds that name a rate limit
	l.decodeCron(s)
	l.checkAfter(s)
	l.decodeQueues(s)
	s.backendEnv = l.sortedEnv()
	if errs := l.errs.result(); errs != nil {
		return nil, errs
	}
	return s, nil
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parse returns the root mapping of a file, nil when the file is empty or
// broken (one error is recorded for a broken file).
func (l *loader) parse(f *srcFile, data []byte) *yaml.Node {
	cr := &countingReader{r: bytes.NewReader(data)}
	dec := yaml.NewDecoder(cr)
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if err != io.EOF {
			l.syntaxErr(f, data, cr.n, err)
		}
		return nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == io.EOF:
	case err != nil:
		l.syntaxErr(f, data, cr.n, err)
		return nil
	default:
		if body := docBody(&extra); body != nil && !isNull(body) {
			l.errAt(f, body, "", "a file holds one YAML document; split documents into separate files")
		}
	}
	root := docBody(&doc)
	if root == nil || isNull(root) {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		l.errAt(f, root, "", "the top level must be a mapping with keys %s, got %s", strings.Join(sections, ", "), describe(root, false))
		return nil
	}
	return root
}

func docBody(doc *yaml.Node) *yaml.Node {
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil
		}
		return doc.Content[0]
	}
	return doc
}

func (l *loader) syntaxErr(f *srcFile, data []byte, read int, err error) {
	line, msg := 1, strings.TrimPrefix(err.Error(), "yaml: ")
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil && n >= 1 {
			line = n
		}
		msg = m[2]
	}
	if n := syntaxLine(data, msg, line, read); n > 0 {
		line = n
	}
	l.errs.add(&Error{Pos: Pos{File: f.name, Line: line, Col: 1}, Msg: "invalid YAML: " + msg})
}

// countingReader counts the bytes the YAML parser pulled: it reads in
// small chunks and stops at the error, so the error lies before that count.
type countingReader struct {
	r *bytes.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// syntaxBudget bounds the bytes syntaxLine re-parses for one error: a
// prefix parse costs as much as a load, and a plain bisection over a large
// file costs twenty loads (a 50 MB spec took 100 s).
var syntaxBudget = 16 << 20

// syntaxSlack is how far past an error the parser usually reads: a 512-byte
// chunk, more when a long key or a flow collection makes it look ahead.
const syntaxSlack = 2 << 10

// parsePrefix is parseAll; tests wrap it to count the work done.
var parsePrefix = parseAll

// syntaxLine finds the line of a YAML syntax error: the first prefix of
// the file, cut at a line end, that fails with the same message ends on
// the line that made it fail. The parser's own line, from, is where the
// enclosing construct starts (0-based for parser errors, exact for scanner
// errors): the answer is not before it. The parser read only read bytes,
// so the prefix that ends on the line holding the last of them fails the
// same way: the answer is not after it. The answer is found by bisection
// between the two, first trying the last syntaxSlack bytes read, assuming
// that once a prefix fails that way longer ones do too. When the search
// would re-parse more than syntaxBudget bytes it stops at the best upper
// bound found, a line at or just after the mistake. It returns 0 when it
// cannot tell.
func syntaxLine(data []byte, msg string, from, read int) int {
	var ends []int // ends[k-1] is the length of the first k lines
	for i, c := range data {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	// lineAt is the line that holds byte offset-1 (the offset-th byte).
	lineAt := func(offset int) int { return min(sort.SearchInts(ends, offset)+1, len(ends)) }
	budget := syntaxBudget
	// same reports whether the first k lines fail with msg; ok is false
	// once the budget is spent.
	same := func(k int) (fails, ok bool) {
		n := ends[k-1]
		if n > budget {
			return false, false
		}
		budget -= n
		err := parsePrefix(data[:n])
		if err == nil {
			return false, true
		}
		m := strings.TrimPrefix(err.Error(), "yaml: ")
		if sm := yamlLineRE.FindStringSubmatch(err.Error()); sm != nil {
			m = sm[2]
		}
		return m == msg, true
	}
	// The answer is in [lo, hi], and the first hi lines fail with msg.
	lo, hi := max(min(from, len(ends)), 1), lineAt(max(read, 1))
	if hi < lo {
		return 0 // the parser's count disagrees with its line
	}
	if fails, ok := same(lo); !ok {
		return hi
	} else if fails {
		return lo
	}
	lo++
	if w := lineAt(read - syntaxSlack); w > lo && w <= hi {
		fails, ok := same(w - 1)
		switch {
		case !ok:
			return hi
		case fails:
			hi = w - 1
		default:
			lo = w
		}
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		fails, ok := same(mid)
		switch {
		case !ok:
			return hi
		case fails:
			hi = mid
		default:
			lo = mid + 1
		}
	}
	return hi
}

// parseAll parses every document in data and returns the first error.
func parseAll(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// scanAliases refuses every alias: expanding them is how "billion laughs"
// documents blow up, and a spec gains little from them. Aliases are not
// followed, so the walk is linear in the file size.
func (l *loader) scanAliases(f *srcFile, n *yaml.Node) {
	if n.Kind == yaml.AliasNode {
		l.errAt(f, n, "", "YAML aliases (*%s) are not supported; repeat the value instead", short(n.Value))
		return
	}
	for _, c := range n.Content {
		l.scanAliases(f, c)
	}
}

// collect records the declarations of one file's top-level mapping.
func (l *loader) collect(f *srcFile, root *yaml.Node) {
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			if k.Kind != yaml.AliasNode {
				l.errAt(f, k, "", "top-level keys must be one of %s, got %s", strings.Join(sections, ", "), describe(k, false))
			}
			continue
		}
		if prev, dup := seen[k.Value]; dup {
			l.errAt(f, k, "", "duplicate key %s; first at %s", quote(k.Value), f.pos(prev))
			continue
		}
		seen[k.Value] = k
		switch k.Value {
		case "cluster":
			if l.cluster != nil {
				l.errAt(f, k, "cluster", "declared twice: %s and %s", l.cluster.file.pos(l.cluster.key), f.pos(k))
				continue
			}
			l.cluster = &decl{file: f, key: k, val: v}
		case "backends", "semaphores", "cron", "queues", "rate_limits":
			if k.Value == "backends" && l.firstBackends == nil {
				l.firstBackends = &decl{file: f, key: k, val: v}
			}
			l.collectNamed(f, k.Value, v)
		default:
			l.errAt(f, k, "", "unknown top-level key %s%s; valid keys are %s", quote(k.Value), didYouMean(k.Value, sections), strings.Join(sections, ", "))
		}
	}
}

// collectNamed records the entries of one section, refusing names declared
// twice in any of the files.
func (l *loader) collectNamed(f *srcFile, section string, n *yaml.Node) {
	if isNull(n) || n.Kind == yaml.AliasNode {
		return
	}
	if n.Kind != yaml.MappingNode {
		l.errAt(f, n, section, "must be a mapping of name to settings, got %s", describe(n, false))
		return
	}
	m := l.named[section]
	prefix := sectionPrefix[section]
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			if k.Kind != yaml.AliasNode {
				l.errAt(f, k, section, "names must be strings, got %s", describe(k, false))
			}
			continue
		}
		name := k.Value
		if !nameRE.MatchString(name) {
			l.errAt(f, k, section, "invalid name %s: %s", quote(name), nameRule(name))
		}
		if prev, dup := m[name]; dup {
			l.errAt(f, k, prefix+"."+name, "declared twice: %s and %s", prev.file.pos(prev.key), f.pos(k))
			continue
		}
		if section != "backends" {
			if l.objects >= MaxObjects {
				if l.objects == MaxObjects {
					l.errs.add(&Error{Pos: f.posOf(k), Address: prefix + "." + name, Err: ErrTooManyObjects,
						Msg: fmt.Sprintf("too many objects: a spec holds at most %d semaphores, cron tasks, queues and rate limits together; this one and those after it are ignored", MaxObjects)})
					l.objects++
				}
				continue
			}
			l.objects++
		}
		m[name] = &decl{file: f, key: k, val: v}
	}
}

// nameRule says why a name is invalid.
func nameRule(name string) string {
	switch {
	case name == "":
		return "a name must not be empty"
	case len(name) > 63:
		return fmt.Sprintf("a name has at most 63 characters, this one has %d", len(name))
	case strings.ToLower(name) != name:
		return "names are lowercase"
	case !nameRE.MatchString(name[:1]):
		return "a name starts with a lowercase letter or a digit"
	}
	return `a name holds only lowercase letters, digits, "_", "." and "-"`
}

// sortedNames returns the names declared in a section, sorted, so that
// decoding (and so error order before sorting) is deterministic.
func (l *loader) sortedNames(section string) []string {
	m := l.named[section]
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
