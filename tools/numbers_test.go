package tools

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// Numbers in argument errors read as plain decimals: no "9.9999999×10⁰⁷"
// (the validator's own rendering), no exponent, whatever the bound or the
// value, for every numeric argument of every tool.
func TestArgumentErrorsWriteNumbersPlainly(t *testing.T) {
	d := NewDeps(nil, DefaultConfig(), nil)
	values := []string{"0", "-1", "1.5", "99999999", "100000000", "1e9", "31622401", "4294967296", "9007199254740993", "1e300", "-1e300", "123456789.25"}
	checked := 0
	for _, tool := range All(d) {
		var schema struct {
			Properties map[string]struct {
				Type  string          `json:"type"`
				Items json.RawMessage `json:"items"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(tool.Def.RawInputSchema, &schema); err != nil {
			t.Fatal(err)
		}
		check := compileSchema(tool.Def.Name, "input", tool.Def.RawInputSchema)
		for name, p := range schema.Properties {
			if p.Type != "integer" && p.Type != "number" && p.Type != "array" {
				continue
			}
			for _, v := range values {
				raw := fmt.Sprintf(`{%q: %s}`, name, v)
				if p.Type == "array" {
					raw = fmt.Sprintf(`{%q: [%s]}`, name, v)
				}
				err := check.checkJSON([]byte(raw))
				if err == nil {
					continue
				}
				checked++
				msg := err.Error()
				if strings.ContainsAny(msg, "×⁰¹²³⁴⁵⁶⁷⁸⁹") || strings.Contains(msg, "e+") || strings.Contains(msg, "E+") {
					t.Errorf("%s %s=%s: %s", tool.Def.Name, name, v, msg)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no numeric argument was checked")
	}
}
