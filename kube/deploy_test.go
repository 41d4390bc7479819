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
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/vgpu-host/vgpu-host/internal/kubetest"
	"github.com/vgpu-host/vgpu-host/kube"
)

// TestDeployManifestsUpstream: every document in deploy/kubernetes (and its dra/) decodes
// strictly into its k8s.io/api type and survives the round trip, and each DaemonSet mounts
// exactly the host paths its plugin reads, where it reads them.
func TestDeployManifestsUpstream(t *testing.T) {
	files, _ := filepath.Glob("../deploy/kubernetes/*.yaml")
	dra, _ := filepath.Glob("../deploy/kubernetes/dra/*.yaml")
	if len(files) == 0 || len(dra) == 0 {
		t.Fatal("no manifests in deploy/kubernetes")
	}
	files = append(files, dra...)
	kinds := map[string]int{}
	var daemonSets []appsv1.DaemonSet
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
				var ds appsv1.DaemonSet
				json.Unmarshal(j, &ds)
				daemonSets = append(daemonSets, ds)
			case "ClusterRole":
				err = kubetest.StrictRoundTrip[rbacv1.ClusterRole](j)
			case "ClusterRoleBinding":
				err = kubetest.StrictRoundTrip[rbacv1.ClusterRoleBinding](j)
			case "DeviceClass":
				err = kubetest.StrictRoundTrip[resourcev1.DeviceClass](j)
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
	if kinds["DaemonSet"] != 2 || kinds["ServiceAccount"] != 2 || kinds["DeviceClass"] != 1 {
		t.Fatalf("kinds %v", kinds)
	}
	for _, ds := range daemonSets {
		checkDaemonSet(t, ds)
	}
}

func checkDaemonSet(t *testing.T, ds appsv1.DaemonSet) {
	c := ds.Spec.Template.Spec.Containers[0]
	if ds.Name == "vgpu-host-dra" {
		if !slices.Equal(c.Command[len(c.Command)-1:], []string{"dra-plugin"}) || c.Env[0].Name != "NODE_NAME" {
			t.Errorf("dra command %v env %v", c.Command, c.Env)
		}
	} else if !slices.Equal(c.Command[len(c.Command)-2:], []string{"device-plugin", "--nfd"}) {
		t.Errorf("command %v", c.Command)
	}
	if !slices.Contains(c.Command, "/host") {
		t.Errorf("%s: command %v without --host-root /host", ds.Name, c.Command)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	var hostPaths []string
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		hostPaths = append(hostPaths, v.HostPath.Path)
		// Every host path is mounted at the same place under --host-root /host, except the
		// kubelet's directories and CDI's, which the plugin reaches by its own flags, at the
		// node's paths (the kubelet and the runtime read what it writes there).
		want := "/host" + v.HostPath.Path
		if strings.HasPrefix(v.HostPath.Path, "/var/lib/kubelet/") || v.HostPath.Path == "/var/run/cdi" {
			want = v.HostPath.Path
		}
		if mounts[v.Name] != want {
			t.Errorf("hostPath %s mounted at %s, want %s", v.HostPath.Path, mounts[v.Name], want)
		}
	}
	// What the plugin reads: the inventory, pci.ids names wherever the distribution keeps them
	// (/usr/share/misc, /usr/share/hwdata), the allocation ledger, the VFIO nodes.
	for _, p := range []string{"/sys", "/usr/share", "/var/lib/vgpu-host", "/dev/vfio"} {
		if !slices.Contains(hostPaths, p) {
			t.Errorf("%s does not mount %s", ds.Name, p)
		}
	}
	for _, m := range c.VolumeMounts {
		if (m.MountPath == "/host/usr/share" || m.MountPath == "/host/dev/vfio") && !m.ReadOnly {
			t.Errorf("%s mounts %s writable", ds.Name, m.MountPath)
		}
	}
	// GPU nodes are commonly tainted; the plugin must still run there.
	for _, key := range []string{"nvidia.com/gpu", "vgpu-host.io/gpu"} {
		tolerated := false
		for _, tol := range ds.Spec.Template.Spec.Tolerations {
			// Toleration.ToleratesTaint's rules for Exists (the method wants a klog.Logger).
			tolerated = tolerated || tol.Operator == corev1.TolerationOpExists && (tol.Key == key || tol.Key == "") &&
				(tol.Effect == "" || tol.Effect == corev1.TaintEffectNoSchedule)
		}
		if !tolerated {
			t.Errorf("%s does not tolerate %s:NoSchedule", ds.Name, key)
		}
	}
	if ds.Name == "vgpu-host-device-plugin" && !strings.HasSuffix(mounts["nfd-features"], kube.FeaturesFile[:strings.LastIndexByte(kube.FeaturesFile, '/')]) {
		t.Errorf("NFD mount %s does not hold %s", mounts["nfd-features"], kube.FeaturesFile)
	}
	if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || *sc.Privileged || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("security context %+v", c.SecurityContext)
	}
}
