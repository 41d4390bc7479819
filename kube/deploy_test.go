package kube_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/vgpu-host/vgpu-host/internal/kubetest"
	"github.com/vgpu-host/vgpu-host/kube"
)

// TestDeployManifestsUpstream: every document in deploy/kubernetes decodes strictly into its
// k8s.io/api type and survives the round trip, and the DaemonSet mounts exactly the host paths
// the plugin reads, where it reads them.
func TestDeployManifestsUpstream(t *testing.T) {
	files, _ := filepath.Glob("../deploy/kubernetes/*.yaml")
	if len(files) == 0 {
		t.Fatal("no manifests in deploy/kubernetes")
	}
	kinds := map[string]int{}
	var ds appsv1.DaemonSet
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if doc == nil {
				continue
			}
			j, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			kind, _ := doc["kind"].(string)
			kinds[kind]++
			switch kind {
			case "DaemonSet":
				err = kubetest.StrictRoundTrip[appsv1.DaemonSet](j)
				json.Unmarshal(j, &ds)
			case "Namespace":
				err = kubetest.StrictRoundTrip[corev1.Namespace](j)
			case "ServiceAccount":
				err = kubetest.StrictRoundTrip[corev1.ServiceAccount](j)
			case "ConfigMap":
				err = kubetest.StrictRoundTrip[corev1.ConfigMap](j)
				var cm corev1.ConfigMap
				json.Unmarshal(j, &cm)
				p := filepath.Join(t.TempDir(), "k.yaml")
				os.WriteFile(p, []byte(cm.Data["kubernetes.yaml"]), 0o644)
				if _, cerr := kube.LoadConfig(p, true); cerr != nil {
					t.Errorf("%s: the plugin rejects the ConfigMap's config: %v", f, cerr)
				}
			default:
				t.Errorf("%s: kind %q has no test", f, kind)
			}
			if err != nil {
				t.Errorf("%s: %v", f, err)
			}
		}
	}
	if kinds["DaemonSet"] != 1 || kinds["ServiceAccount"] != 1 {
		t.Fatalf("kinds %v", kinds)
	}
	c := ds.Spec.Template.Spec.Containers[0]
	if !slices.Equal(c.Command[len(c.Command)-2:], []string{"device-plugin", "--nfd"}) || !slices.Contains(c.Command, "/host") {
		t.Errorf("command %v", c.Command)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		// Every host path is mounted at the same place under --host-root /host, except the
		// kubelet's directory, which the plugin reaches by its own flag.
		want := "/host" + v.HostPath.Path
		if v.HostPath.Path == "/var/lib/kubelet/device-plugins" {
			want = v.HostPath.Path
		}
		if mounts[v.Name] != want {
			t.Errorf("hostPath %s mounted at %s, want %s", v.HostPath.Path, mounts[v.Name], want)
		}
	}
	if !strings.HasSuffix(mounts["nfd-features"], kube.FeaturesFile[:strings.LastIndexByte(kube.FeaturesFile, '/')]) {
		t.Errorf("NFD mount %s does not hold %s", mounts["nfd-features"], kube.FeaturesFile)
	}
	if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || *sc.Privileged || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("security context %+v", c.SecurityContext)
	}
}
