package web

// Config is the `dashboard:` part of patchbot.yaml. The dashboard is served
// on the config's `http:` address beside /metrics (by `patchbot watch`) or
// by `patchbot serve`.
type Config struct {
	// BaseURL is the dashboard's public address; when set, every reply's
	// "results:" line links the run's page.
	BaseURL string `yaml:"base_url"`
	// TokenFile (mode 0600) holds the token the form to start a run asks
	// for; without it the form is off.
	TokenFile string `yaml:"token_file"`
	// LoreURL is where a Message-ID is looked up (default
	// https://lore.kernel.org/all/); LoreHosts the hosts a lore URL on the
	// form may name (default: LoreURL's host).
	LoreURL   string   `yaml:"lore_url"`
	LoreHosts []string `yaml:"lore_hosts"`
	// MaxUploadMiB caps an uploaded mbox (default 8).
	MaxUploadMiB int `yaml:"max_upload_mib"`
}
