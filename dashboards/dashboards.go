package dashboards

import (
	"embed"
	"io/fs"
	"path"
	"slices"
)

//go:embed *.json provisioning
var files embed.FS

// FS returns the dashboards (*.json at the root) and the provisioning
// files (provisioning/datasources/*.yaml, provisioning/dashboards/*.yaml).
func FS() fs.FS { return files }

// Names returns the dashboards' file names, sorted.
func Names() []string {
	entries, _ := files.ReadDir(".")
	var out []string
	for _, e := range entries {
		if !e.IsDir() && path.Ext(e.Name()) == ".json" {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out
}

// JSON returns the dashboard file name holds.
func JSON(name string) ([]byte, error) { return files.ReadFile(name) }
