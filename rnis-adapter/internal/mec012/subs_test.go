package mec012

import (
	"strings"
	"testing"
)

// A filter of the wrong type is refused, never read as "no filter" (which would widen the
// subscription to every UE or cell); found by schemathesis with `"ecgi": false`.
func TestFilterCriteriaOfTheWrongTypeAreRefused(t *testing.T) {
	const head = `{"subscriptionType":"CellChangeSubscription","callbackReference":"http://cb.test/x",` +
		`"filterCriteriaAssocHo":`
	bad := map[string]string{
		"ecgi false":          `{"ecgi":false}`,
		"ecgi null":           `{"ecgi":null}`,
		"ecgi without plmn":   `{"ecgi":[{"cellId":"0271100"}]}`,
		"associateId object":  `{"associateId":{"type":1,"value":"10.0.0.1"}}`,
		"associateId value 1": `{"associateId":[{"type":1,"value":1}]}`,
		"hoStatus strings":    `{"hoStatus":["3"]}`,
		"appInstanceId 1":     `{"appInstanceId":1}`,
	}
	for name, filter := range bad {
		if _, err := parseSubscription([]byte(head + filter + `}`)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	good := `{"ecgi":[{"plmn":{"mcc":"208","mnc":"93"},"cellId":"0271100"}],"hoStatus":[1,3]}`
	s, err := parseSubscription([]byte(head + good + `}`))
	if err != nil || strings.Join(s.f.cells, ",") != "0271100" || len(s.f.hoStatus) != 2 {
		t.Fatalf("a valid filter: %v %+v", err, s)
	}
}
