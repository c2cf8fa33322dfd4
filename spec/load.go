package spec

import (
	"bytes"
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
}

// Load reads a spec from a file or from a directory of *.yaml/*.yml files
// (not recursive, hidden files skipped, merged in name order). On failure
// the error is an Errors listing every problem found.
func Load(path string, opts LoadOptions) (*Spec, error) {
	fail := func(msg string) (*Spec, error) {
		return nil, Errors{{Pos: Pos{File: path, Line: 1, Col: 1}, Msg: msg}}
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fail("cannot read spec: " + pathErr(err))
	}
	if !fi.IsDir() {
		data, err := os.ReadFile(path)
		if err != nil {
			return fail("cannot read spec: " + pathErr(err))
		}
		return load([]input{{name: path, data: data}}, opts)
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return fail("cannot read spec directory: " + pathErr(err))
	}
	var ins []input
	var readErrs Errors
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		full := filepath.Join(path, name)
		if st, err := os.Stat(full); err == nil && st.IsDir() {
			continue
		}
		data, err := os.ReadFile(full)
		if err != nil {
			readErrs = append(readErrs, &Error{Pos: Pos{File: full, Line: 1, Col: 1}, Msg: "cannot read spec: " + pathErr(err)})
			continue
		}
		ins = append(ins, input{name: full, data: data})
	}
	if len(ins) == 0 && len(readErrs) == 0 {
		return fail("no *.yaml or *.yml files in directory")
	}
	s, err := load(ins, opts)
	if len(readErrs) > 0 {
		var errs Errors
		errors.As(err, &errs)
		return nil, sortErrors(append(errs, readErrs...))
	}
	return s, err
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
	return load(ins, opts)
}

func pathErr(err error) string {
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
	p := f.posOf(n)
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

// decl is one declaration (a named object, a backend or cluster) found in
// a file, waiting to be decoded once all files are read.
type decl struct {
	file *srcFile
	key  *yaml.Node
	val  *yaml.Node
}

// Top-level sections and the prefix their entries use in addresses.
var sections = []string{"backends", "cluster", "semaphores", "cron", "queues"}

var sectionPrefix = map[string]string{
	"backends":   "backends",
	"semaphores": string(KindSemaphore),
	"cron":       string(KindCron),
	"queues":     string(KindQueue),
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

type loader struct {
	getenv  func(string) (string, bool) // nil with SkipEnv
	dataDir string
	errs    Errors

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
}

func load(ins []input, opts LoadOptions) (*Spec, error) {
	sort.Slice(ins, func(i, j int) bool { return ins[i].name < ins[j].name })
	l := &loader{
		getenv:  opts.Getenv,
		dataDir: opts.DataDir,
		named:   map[string]map[string]*decl{},
		known:   map[string]string{},
	}
	if l.getenv == nil {
		l.getenv = os.LookupEnv
	}
	if opts.SkipEnv {
		l.getenv = nil
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
	}
	for _, in := range ins {
		f := &srcFile{name: in.name, dir: filepath.Dir(in.name)}
		if abs, err := filepath.Abs(f.dir); err == nil {
			f.dir = abs
		}
		s.Files = append(s.Files, in.name)
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
	l.decodeCron(s)
	l.decodeQueues(s)
	if len(l.errs) > 0 {
		return nil, sortErrors(l.errs)
	}
	return s, nil
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parse returns the root mapping of a file, nil when the file is empty or
// broken (one error is recorded for a broken file).
func (l *loader) parse(f *srcFile, data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if err != io.EOF {
			l.syntaxErr(f, data, err)
		}
		return nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == io.EOF:
	case err != nil:
		l.syntaxErr(f, data, err)
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

func (l *loader) syntaxErr(f *srcFile, data []byte, err error) {
	line, msg := 1, strings.TrimPrefix(err.Error(), "yaml: ")
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil && n >= 1 {
			line = n
		}
		msg = m[2]
	}
	if n := syntaxLine(data, msg); n > 0 {
		line = n
	}
	l.errs = append(l.errs, &Error{Pos: Pos{File: f.name, Line: line, Col: 1}, Msg: "invalid YAML: " + msg})
}

// syntaxLine finds the line of a YAML syntax error. The parser reports the
// line where the enclosing construct starts, often far from the mistake
// (and 0-based at that). The first prefix of the file, cut at a line end,
// that fails with the same message ends on the line that made it fail;
// it is found by bisection, assuming that once a prefix fails that way
// longer ones do too. It returns 0 when it finds none.
func syntaxLine(data []byte, msg string) int {
	var ends []int // ends[k-1] is the length of the first k lines
	for i, c := range data {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	same := func(k int) bool {
		err := parseAll(data[:ends[k-1]])
		if err == nil {
			return false
		}
		m := strings.TrimPrefix(err.Error(), "yaml: ")
		if sm := yamlLineRE.FindStringSubmatch(err.Error()); sm != nil {
			m = sm[2]
		}
		return m == msg
	}
	k := sort.Search(len(ends), func(i int) bool { return same(i + 1) }) + 1
	if k > len(ends) {
		return 0
	}
	return k
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
		case "backends", "semaphores", "cron", "queues":
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
