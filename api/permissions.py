"""Who may use the job and ledger routes: a token's user in an organisation. An operator (staff, in no
organisation) is refused with 403: their token reaches no organisation's jobs (they have the console)."""

from rest_framework.permissions import IsAuthenticated

from portal.models import organisation_for

NO_ORGANISATION = "Your account is not in an organisation, so no job is yours to reach through the API."


class InOrganisation(IsAuthenticated):
    message = NO_ORGANISATION

    def has_permission(self, request, view) -> bool:
        return super().has_permission(request, view) and organisation_for(request.user) is not None
