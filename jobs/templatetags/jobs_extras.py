from django import template

register = template.Library()


@register.filter
def duration(seconds) -> str:
    """Seconds as a short human duration: 45 s, 3 min 20 s, 2 h 5 min."""
    if seconds is None:
        return "–"
    seconds = round(float(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"
