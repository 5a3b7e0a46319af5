package tools

import (
	"bytes"
	"reflect"
	"strconv"
	"strings"

	validator "github.com/santhosh-tekuri/jsonschema/v6"
)

// longString returns the long string a placeholder stands for.
func (a *Arguments) longString(s string) (string, bool) {
	rest, ok := strings.CutPrefix(s, placeholderPrefix)
	if !ok {
		return "", false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || n >= len(a.long) {
		return "", false
	}
	return a.long[n], true
}

// fillValue puts the long strings back into v, a value decoded from the
// skeleton by the validator's decoder, and returns it and how many it put
// back.
func (a *Arguments) fillValue(v any) (any, int) {
	switch v := v.(type) {
	case string:
		if s, ok := a.longString(v); ok {
			return s, 1
		}
	case map[string]any:
		n := 0
		for k, e := range v {
			e, m := a.fillValue(e)
			if m > 0 {
				v[k] = e
				n += m
			}
		}
		return v, n
	case []any:
		n := 0
		for i, e := range v {
			var m int
			v[i], m = a.fillValue(e)
			n += m
		}
		return v, n
	}
	return v, 0
}

// fillTyped puts the long strings back into the strings of v, a value
// decoded from the skeleton by encoding/json, and returns how many it put
// back.
func (a *Arguments) fillTyped(v reflect.Value) int {
	switch v.Kind() {
	case reflect.String:
		if s, ok := a.longString(v.String()); ok && v.CanSet() {
			v.SetString(s)
			return 1
		}
	case reflect.Pointer:
		if !v.IsNil() {
			return a.fillTyped(v.Elem())
		}
	case reflect.Interface:
		if v.IsNil() || !v.CanSet() {
			return 0
		}
		c := reflect.New(v.Elem().Type()).Elem()
		c.Set(v.Elem())
		n := a.fillTyped(c)
		if n > 0 {
			v.Set(c)
		}
		return n
	case reflect.Struct:
		n := 0
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				n += a.fillTyped(f)
			}
		}
		return n
	case reflect.Slice, reflect.Array:
		n := 0
		for i := range v.Len() {
			n += a.fillTyped(v.Index(i))
		}
		return n
	case reflect.Map:
		n := 0
		iter := v.MapRange()
		for iter.Next() {
			c := reflect.New(iter.Value().Type()).Elem()
			c.Set(iter.Value())
			if m := a.fillTyped(c); m > 0 {
				v.SetMapIndex(iter.Key(), c)
				n += m
			}
		}
		return n
	}
	return 0
}

// decode validates the arguments against schema and decodes them into in
// (a pointer to the tool's input), with the long strings decoded once, by
// lex. Should the skeleton not decode exactly as the arguments would (a
// placeholder that did not end up in a string), the arguments are decoded
// whole.
func (a *Arguments) decode(schema *schemaCheck, in any) error {
	if len(a.long) > 0 {
		if ok, err := a.decodeSkeleton(schema, in); ok {
			return err
		}
		reflect.ValueOf(in).Elem().SetZero()
	}
	return decodeRaw(a.raw, schema, in)
}

// decodeSkeleton is decode by way of the skeleton; it reports false when the
// arguments must be decoded whole instead.
func (a *Arguments) decodeSkeleton(schema *schemaCheck, in any) (bool, error) {
	inst, err := validator.UnmarshalJSON(bytes.NewReader(a.skeleton))
	if err != nil {
		return false, nil
	}
	// Validated with the placeholders in: the validator copies every string
	// it checks, which for a put_files body was a second copy of the
	// content. No input schema constrains a string in a way a placeholder
	// meets and a long string does not (TestPlaceholdersValidateLikeLongStrings
	// keeps it so); on failure the filled arguments are validated again, for
	// the error to show what the client sent.
	valid := schema.check(inst) == nil
	inst, n := a.fillValue(inst)
	if n != len(a.long) {
		return false, nil
	}
	if !valid {
		if err := schema.check(inst); err != nil {
			return true, err
		}
	}
	if decodeArgs(a.skeleton, in) != nil || a.fillTyped(reflect.ValueOf(in)) != len(a.long) {
		return false, nil
	}
	return true, nil
}
