package transport

import "github.com/getfelix/felix-go/internal/quicconf"

// CertFile is the name of the self-signed certificate a broker writes in
// its data directory when none is configured. It is here for programs that
// embed the broker outside this module (see examples/embed), which cannot
// import internal/quicconf; code in this module uses quicconf.CertFile.
const CertFile = quicconf.CertFile
