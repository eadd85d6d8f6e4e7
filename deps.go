//go:build deps

// Package patchbot pins the modules that the packages use while they are
// being written in parallel, so that `go mod tidy` keeps them. Removed once
// every module is imported by real code.
package patchbot

import (
	_ "github.com/digitalocean/go-libvirt"
	_ "github.com/emersion/go-imap/v2/imapclient"
	_ "github.com/emersion/go-message/mail"
	_ "github.com/emersion/go-sasl"
	_ "github.com/emersion/go-smtp"
	_ "github.com/google/go-github/v60/github"
	_ "github.com/hanwen/go-fuse/v2/fs"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "golang.org/x/sys/unix"
	_ "gopkg.in/yaml.v3"
	_ "libvirt.org/go/libvirtxml"
	_ "modernc.org/sqlite"
)
