"""The site: finding and loading runs, building the pages, writing them atomically, publishing compile traces."""
