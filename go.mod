module github.com/weightsnap/weightsnap

go 1.26.0

require github.com/containerd/errdefs v1.0.0
