"""Pictures drawn from labels, one per item of a store: poses and room layouts (``trainer render``)."""
