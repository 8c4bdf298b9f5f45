package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/internal/clustercerts"
)

// certsOpts are felix cluster certs' flags.
type certsOpts struct {
	dir       string
	nodes     string
	etcdHosts string
}

func (o *certsOpts) register(fs *pflag.FlagSet) {
	fs.StringVar(&o.dir, "dir", "felix-cluster-certs", "certs: folder for the cluster CA and the members' certificates; files already there are kept")
	fs.StringVar(&o.nodes, "nodes", "", "certs: comma-separated node ids (cluster_node_id) to make certificates for")
	fs.StringVar(&o.etcdHosts, "etcd-hosts", "", "certs: also make etcd's server certificate (etcd.pem), valid for these comma-separated names and addresses members dial etcd at")
}

// run mints what is missing in --dir and prints each member's knobs.
func (o *certsOpts) run(out io.Writer, changed func(string) bool, args []string) error {
	switch {
	case len(args) > 0:
		return usagef("certs takes no arguments (node ids go in --nodes), got %q", args)
	case changed("json"):
		return usagef("--json is ls's")
	case changed("wait"):
		return usagef("--wait is drain's")
	case changed("admin") || changed("token") || changed("timeout"):
		return usagef("certs asks no broker: --admin, --token and --timeout are ls's and drain's")
	}
	nodes, err := parseNodeIDs(o.nodes)
	if err != nil {
		return err
	}
	hosts := splitHosts(o.etcdHosts)
	if len(hosts) > 0 && slices.Contains(nodes, clustercerts.EtcdName) {
		return usagef("node id %q is the name of etcd's certificate with --etcd-hosts: pick another", clustercerts.EtcdName)
	}
	files, err := clustercerts.Ensure(o.dir, nodes)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "peer link certificates in %s: the CA is %s, its key %s (keep it off the members; it signs new ones).\n",
		o.dir, files[nodes[0]].CA, filepath.Join(o.dir, clustercerts.CAKeyFile))
	fmt.Fprintln(out, "Give each member the CA and its own two files, and set (felix.yaml; or --cluster-tls-ca ... flags, FELIX_CLUSTER_TLS_CA ...):")
	for _, n := range nodes {
		f := files[n]
		fmt.Fprintf(out, "\n# %s\ncluster_node_id: %s\ncluster_tls_ca: %s\ncluster_tls_cert: %s\ncluster_tls_key: %s\n", n, n, f.CA, f.Cert, f.Key)
		if len(hosts) > 0 {
			fmt.Fprintf(out, "cluster_etcd_tls_ca: %s\ncluster_etcd_tls_cert: %s\ncluster_etcd_tls_key: %s\n", f.CA, f.Cert, f.Key)
		}
	}
	if len(hosts) == 0 {
		return nil
	}
	etcd, err := clustercerts.EnsureEtcd(o.dir, hosts)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\netcd's certificate for %s is %s, its key %s. Serve etcd with mutual TLS (and https:// client URLs), so that only a certificate of this CA reaches it:\n"+
		"etcd --cert-file %s --key-file %s --trusted-ca-file %s --client-cert-auth ...\n", strings.Join(hosts, ", "), etcd.Cert, etcd.Key, etcd.Cert, etcd.Key, etcd.CA)
	return nil
}

// splitHosts reads --etcd-hosts: the non-empty names, trimmed.
func splitHosts(s string) []string {
	var hosts []string
	for _, h := range strings.Split(s, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

// parseNodeIDs reads --nodes: valid, distinct node ids, at least one.
func parseNodeIDs(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, usagef("certs needs --nodes: the node ids of the members, e.g. --nodes node-1,node-2,node-3")
	}
	var ids []string
	seen := map[string]bool{}
	for _, id := range strings.Split(s, ",") {
		id = strings.TrimSpace(id)
		switch {
		case !config.ValidNodeID(id):
			return nil, usagef("node id %q: use letters, digits, '-', '_' and '.', at most 64 (as cluster_node_id)", id)
		case seen[id]:
			return nil, usagef("node id %q twice in --nodes", id)
		}
		seen[id] = true
		ids = append(ids, id)
	}
	return ids, nil
}
