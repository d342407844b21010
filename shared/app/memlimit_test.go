package app

import (
	"os"
	"path/filepath"
	"testing"
)

func TestApplyMemoryLimit(t *testing.T) {
	write := func(t *testing.T, files map[string]string) string {
		root := t.TempDir()
		for name, content := range files {
			p := filepath.Join(root, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	tests := []struct {
		name    string
		env     string
		files   map[string]string
		want    int64
		wantErr bool
	}{
		{name: "v2 limit", files: map[string]string{"memory.max": "268435456\n"}, want: 241591910},
		{name: "v2 no limit", files: map[string]string{"memory.max": "max\n"}, wantErr: true},
		{name: "v1 limit", files: map[string]string{"memory/memory.limit_in_bytes": "104857600\n"}, want: 94371840},
		{name: "v1 no limit", files: map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, wantErr: true},
		{name: "no cgroup", files: nil, wantErr: true},
		{name: "GOMEMLIMIT wins", env: "200MiB", files: map[string]string{"memory.max": "268435456\n"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var set int64 = -1
			got, err := applyMemoryLimit(tt.env, write(t, tt.files), func(n int64) int64 { set = n; return 0 })
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.wantErr {
				if set != -1 {
					t.Errorf("set the limit to %d, want untouched", set)
				}
				return
			}
			if got != tt.want || set != tt.want {
				t.Errorf("limit %d (set %d), want %d", got, set, tt.want)
			}
		})
	}
}
