from django import template
from django.utils.html import format_html

register = template.Library()


@register.simple_tag
def state_badge(job, size: str = "") -> str:
    """A job's state as a badge: On hold for a queued job the operators keep from starting, its state else."""
    held = job.on_hold and job.state == "queued"
    classes = " ".join(filter(None, ["state", size, "on_hold" if held else job.state]))
    return format_html('<span class="{}">{}</span>', classes, "On hold" if held else job.get_state_display())


@register.simple_tag
def event_badge(event) -> str:
    """A timeline line's badge: the state it entered, or the operators' hold put on the job or lifted."""
    css = "on_hold" if event.hold == event.Hold.PUT else event.state
    label = event.get_hold_display() if event.hold else event.get_state_display()
    return format_html('<span class="state {}">{}</span>', css, label)


@register.filter
def duration(seconds) -> str:
    """Seconds as a short human duration: 0.4 s, 45 s, 3 min 20 s, 2 h 5 min (tenths below ten seconds,
    so that a quick step does not read as taking no time)."""
    if seconds is None:
        return "–"
    seconds = float(seconds)
    if 0 < seconds < 0.05:
        return "under 0.1 s"
    if seconds < 9.95:
        return f"{seconds:.1f} s" if seconds else "0 s"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"
