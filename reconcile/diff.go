package reconcile

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// diffStruct lists the fields of two configs of one struct type that
// differ, as "name have (want want)" by JSON field name, in name order.
// Values print as an operator wrote them in the spec: durations as Go
// durations (1m0s, not the 6e+10 nanoseconds their JSON holds), strings
// bare ("" when empty), the rest with %v.
func diffStruct(have, want any) string {
	h, w := reflect.ValueOf(have), reflect.ValueOf(want)
	if h.Kind() != reflect.Struct || h.Type() != w.Type() {
		if reflect.DeepEqual(have, want) {
			return ""
		}
		return fmt.Sprintf("%s (want %s)", diffValue(h), diffValue(w))
	}
	t := h.Type()
	type field struct{ name, have, want string }
	var fields []field
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if reflect.DeepEqual(h.Field(i).Interface(), w.Field(i).Interface()) {
			continue
		}
		fields = append(fields, field{name, diffValue(h.Field(i)), diffValue(w.Field(i))})
	}
	sort.Slice(fields, func(i, j int) bool { return fields[i].name < fields[j].name })
	parts := make([]string, len(fields))
	for i, f := range fields {
		parts[i] = fmt.Sprintf("%s %s (want %s)", f.name, f.have, f.want)
	}
	return strings.Join(parts, ", ")
}

// durationType is time.Duration's reflect type, told apart from int64.
var durationType = reflect.TypeFor[time.Duration]()

// diffValue renders one config value for diffStruct.
func diffValue(v reflect.Value) string {
	if !v.IsValid() {
		return "none"
	}
	if v.Type() == durationType {
		return time.Duration(v.Int()).String()
	}
	switch v.Kind() {
	case reflect.String:
		if v.String() == "" {
			return `""`
		}
		if strconv.CanBackquote(v.String()) && !strings.ContainsAny(v.String(), " ,()") {
			return v.String()
		}
		return strconv.Quote(v.String())
	default:
		return fmt.Sprint(v.Interface())
	}
}
