package suites

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Choose is the suites a test runs: those asked for, or those the touched
// files select; each is checked to exist with the profile, so that a bad
// name is refused before any kernel is built.
func Choose(asked, files []string, profile string) ([]string, error) {
	names := asked
	if len(names) == 0 {
		sel, err := Select(files)
		if err != nil {
			return nil, fmt.Errorf("choosing suites: %w", err)
		}
		for _, s := range sel {
			names = append(names, s.Name)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no suite covers the files %v", files)
	}
	if err := Check(names, profile); err != nil {
		return nil, err
	}
	return names, nil
}

// Check says whether every suite named exists and has the profile, so
// that a bad name is refused before any kernel is built.
func Check(names []string, profile string) error {
	var errs []error
	for _, n := range names {
		s, err := Lookup(n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := s.Resolve(profile); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CheckProfile says whether some suite has the profile: a profile no suite
// knows is refused at once, before the series is even read.
func CheckProfile(profile string) error {
	all, err := All()
	if err != nil {
		return err
	}
	var names []string
	for _, s := range all {
		if _, ok := s.Profiles[profile]; ok || profile == "" {
			return nil
		}
		names = append(names, s.ProfileNames()...)
	}
	return fmt.Errorf("no suite has a profile %q (profiles: %s)", profile, strings.Join(slices.Compact(slices.Sorted(slices.Values(names))), ", "))
}
