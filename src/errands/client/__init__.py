"""The Queue's own parts: the producer (enqueueing), waiting for outcomes, bulk operator
actions and the shaping of ``stats`` reports. ``errands.Queue`` composes them; nothing here
imports the Queue."""
