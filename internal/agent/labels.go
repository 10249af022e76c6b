package agent

import (
	"fmt"
	"strings"
)

// ParseLabels parses the --labels flag, "k=v,k2=v2", into a map. An empty string is no
// labels.
func ParseLabels(s string) (map[string]string, error) {
	labels := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return labels, nil
	}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok:
			return nil, fmt.Errorf("--labels %q: %q is not key=value; want k=v,k2=v2 (e.g. pool=train,rack=r1)", s, strings.TrimSpace(pair))
		case k == "":
			return nil, fmt.Errorf("--labels %q: %q has an empty key; want k=v,k2=v2 (e.g. pool=train,rack=r1)", s, strings.TrimSpace(pair))
		}
		if _, dup := labels[k]; dup {
			return nil, fmt.Errorf("--labels %q: key %q is given twice", s, k)
		}
		labels[k] = v
	}
	return labels, nil
}
