"""dcgm-exporter source: parse a scrape (exposition), diff scrapes (diff), poll (scrape)."""
