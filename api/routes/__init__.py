"""HTTP routes, one APIRouter per concern."""
