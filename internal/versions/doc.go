// Package versions matches version strings against constraints such as
// ">= 1.2, < 2" or "~> 1.4.0" (the syntax of hashicorp/go-version, which
// Nomad's "version" constraint uses). It is pure, so the scheduler can use
// it; host/jobspec uses it to refuse a constraint that does not parse.
package versions
